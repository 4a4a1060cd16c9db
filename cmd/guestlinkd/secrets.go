package main

import (
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/guestlink/guestlink/internal/secretfile"
)

// Environment variables of the daemon's secret settings. They are removed
// from the daemon's environment once read, so that plugins and guests do
// not inherit them.
const (
	envDatabaseURL = "GUESTLINK_DATABASE_URL"
	envJoin        = "GUESTLINK_JOIN"
)

// secretSetting is a setting that may hold a secret, given three ways:
// --NAME VALUE (seen by every local user in ps), --NAME-file PATH (a file
// only its owner reads) or an environment variable (readable only by the
// daemon's user and root, in /proc/PID/environ).
type secretSetting struct {
	name string
	env  string
	// value is the --NAME flag's variable, file --NAME-file's.
	value *string
	file  *string
	// secret reports whether a value holds a secret (a warning when it is
	// given on the command line; a config file readable by others is
	// refused).
	secret func(string) bool
}

// resolve sets *s.value by the precedence of every flag (the command line,
// then the environment, then the config file), reading the file a
// --NAME-file names. cmdline holds the flags given on the command line, set
// those set by the command line or the config file. It returns a warning
// to log when the command line carries the secret.
func (s secretSetting) resolve(cmdline, set map[string]bool) (warning string, err error) {
	fileFlag := s.name + "-file"
	read := func() error {
		v, err := secretfile.Read(*s.file)
		if err != nil {
			return fmt.Errorf("--%s: %w", fileFlag, err)
		}
		*s.value = v
		return nil
	}
	switch {
	case cmdline[s.name] && cmdline[fileFlag]:
		return "", fmt.Errorf("--%s and --%s: give one", s.name, fileFlag)
	case cmdline[fileFlag]:
		return "", read()
	case cmdline[s.name]:
		if s.secret(*s.value) {
			return fmt.Sprintf("--%s on the command line is visible to every local user in ps: use --%s or %s", s.name, fileFlag, s.env), nil
		}
		return "", nil
	case os.Getenv(s.env) != "":
		// Not the flag's default, which -h would print; the config
		// file's keys were ignored.
		*s.value = os.Getenv(s.env)
		return "", nil
	case set[s.name] && set[fileFlag]:
		return "", fmt.Errorf("the config file sets both %s and %s: keep one", s.name, fileFlag)
	case set[fileFlag]:
		return "", read()
	}
	return "", nil
}

// databaseSecret reports whether a database URL holds a password (in its
// user information or a password parameter).
func databaseSecret(v string) bool {
	if !strings.Contains(v, "://") {
		return false // a SQLite path
	}
	u, err := url.Parse(v)
	if err != nil {
		return true // cannot tell: assume it does
	}
	if _, ok := u.User.Password(); ok {
		return true
	}
	for k := range u.Query() {
		if strings.EqualFold(k, "password") {
			return true
		}
	}
	return false
}

// joinSecret reports whether a --join value is a secret: every token is.
func joinSecret(v string) bool { return v != "" }
