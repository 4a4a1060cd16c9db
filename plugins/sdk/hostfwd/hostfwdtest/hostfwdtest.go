// Package hostfwdtest holds the hostfwd values every check of a nic's
// forwards must refuse, with the reason hostfwd.Parse gives. The parser's
// own test, the QEMU backends' start-time test and the daemon's add and
// launch tests all run this one table, so a value refused at start is
// refused when the device is added.
package hostfwdtest

// Case is a refused hostfwd value and the reason in its error.
type Case struct {
	Name   string // the t.Run name
	Value  string // the device's hostfwd value
	Reason string // hostfwd.Parse's whole error (the daemon adds the device's name and its error kind)
}

// form is hostfwd.Format, what a malformed rule is told to be.
const form = "tcp|udp:[hostaddr]:hostport-[guestaddr]:guestport, e.g. tcp::2222-:22"

// Refused are the values each check refuses: out-of-range ports, QEMU
// options smuggled in after a comma (guestfwd with cmd: runs a host
// command), malformed rules and addresses, and a host port forwarded twice.
var Refused = []Case{
	{"port 99999", "tcp::99999-:22", `hostfwd "tcp::99999-:22": port 99999 is outside 1..65535`},
	{"guest port 0", "tcp::2222-:0", `hostfwd "tcp::2222-:0": port 0 is outside 1..65535`},
	{"guestfwd with cmd", "tcp::2222-:22,guestfwd=tcp:10.0.2.100:1234-cmd:/bin/sh", `hostfwd "guestfwd=tcp:10.0.2.100:1234-cmd:/bin/sh": "guestfwd" is a QEMU option, not a forward; a rule is only ` + form},
	{"guestfwd alone", "guestfwd=tcp:10.0.2.100:1234-cmd:nc", `hostfwd "guestfwd=tcp:10.0.2.100:1234-cmd:nc": "guestfwd" is a QEMU option, not a forward; a rule is only ` + form},
	{"smb share", "tcp::2222-:22 smb=/", `hostfwd "smb=/": "smb" is a QEMU option, not a forward; a rule is only ` + form},
	{"no guest part", "tcp:2222:22", `hostfwd "tcp:2222:22": want ` + form},
	{"sctp", "sctp::2222-:22", `hostfwd "sctp::2222-:22": want ` + form},
	{"six-digit port", "tcp::100000-:22", `hostfwd "tcp::100000-:22": want ` + form},
	{"IPv6 host address", "tcp:[::1]:2222-:22", `hostfwd "tcp:[::1]:2222-:22": want ` + form},
	{"short host address", "tcp:1.2.3:2222-:22", `hostfwd "tcp:1.2.3:2222-:22": "1.2.3" is not an IPv4 address`},
	{"bad guest address", "tcp::2222-999.0.0.1:22", `hostfwd "tcp::2222-999.0.0.1:22": "999.0.0.1" is not an IPv4 address`},
	{"host port twice", "tcp::2222-:22 tcp:127.0.0.1:2222-:23", `hostfwd forwards tcp:127.0.0.1:2222 twice`},
}

// Accepted are values every check accepts.
var Accepted = []string{"", "tcp::2222-:22", "tcp:10.0.0.1:80-10.0.2.15:8080, udp::5353-:53", "tcp::53-:53 udp::53-:53", "tcp::1-:65535"}
