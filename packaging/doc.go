// Package packaging holds the files of guestlink's .deb packages (nfpm
// configurations, systemd units, udev rules) and the test that checks the
// built packages: make packages writes them into bin/packages/.
package packaging
