// Package hostfwd parses the hostfwd key of a user-mode nic device (nictype
// user): the forwards from host ports to guest ports a backend with
// sdk.CapNICUser sets up. The daemon checks a device with Parse when the
// device is added or an instance created, and the QEMU backends build
// their command line from Parse's result at create and start, so a value
// is refused at once or never.
package hostfwd

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
)

// ruleRE is one forward: proto:[hostaddr]:hostport-[guestaddr]:guestport.
var ruleRE = regexp.MustCompile(`^(tcp|udp):([0-9.]*):([0-9]{1,5})-([0-9.]*):([0-9]{1,5})$`)

// Format is the form of one rule, as error messages name it.
const Format = "tcp|udp:[hostaddr]:hostport-[guestaddr]:guestport, e.g. tcp::2222-:22"

// DefaultHostAddr is the host address of a rule that gives none. QEMU's
// own default (every address) is never used.
const DefaultHostAddr = "127.0.0.1"

// Parse parses a hostfwd value: rules separated by spaces or commas, each
// tcp|udp:[hostaddr]:hostport-[guestaddr]:guestport. An empty host address
// is DefaultHostAddr; another host address must be an explicit IPv4
// address, as must a guest address; ports are 1 to 65535; no host port is
// forwarded twice. A rule that carries a QEMU option ("guestfwd=...",
// "smb=...") is refused. It returns the rules with the host address always
// explicit, in QEMU's hostfwd syntax. Its error names the rule and the
// reason; the caller adds the device's name and its own error kind.
func Parse(v string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, rule := range strings.FieldsFunc(v, func(r rune) bool { return r == ' ' || r == ',' }) {
		if opt, _, ok := strings.Cut(rule, "="); ok {
			return nil, fmt.Errorf("hostfwd %q: %q is a QEMU option, not a forward; a rule is only %s", rule, opt, Format)
		}
		m := ruleRE.FindStringSubmatch(rule)
		if m == nil {
			return nil, fmt.Errorf("hostfwd %q: want %s", rule, Format)
		}
		proto, haddr, hport, gaddr, gport := m[1], m[2], m[3], m[4], m[5]
		for _, p := range []string{hport, gport} {
			if n, _ := strconv.Atoi(p); n < 1 || n > 65535 {
				return nil, fmt.Errorf("hostfwd %q: port %s is outside 1..65535", rule, p)
			}
		}
		if haddr == "" {
			haddr = DefaultHostAddr
		}
		for _, a := range []string{haddr, gaddr} {
			if a != "" && net.ParseIP(a).To4() == nil {
				return nil, fmt.Errorf("hostfwd %q: %q is not an IPv4 address", rule, a)
			}
		}
		key := proto + ":" + haddr + ":" + hport
		if seen[key] {
			return nil, fmt.Errorf("hostfwd forwards %s twice", key)
		}
		seen[key] = true
		out = append(out, fmt.Sprintf("%s:%s:%s-%s:%s", proto, haddr, hport, gaddr, gport))
	}
	return out, nil
}
