// Package sdnotify is the host's side of systemd's notification protocol
// from a guest (sd_notify(3), systemd(1) "Readiness Protocol"): the guest's
// service manager (systemd >= 254) sends READY=1 when the system finished
// booting to the address in its vmm.notify_socket system credential, which
// the VMM passes as an SMBIOS type 11 OEM string. This package holds the
// port and the credential the QEMU backends put on the command line and the
// parser of what arrives; the daemon's listener is core/linkhost.
package sdnotify

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Port is the vsock port on the host (CID 2) a guest's systemd sends its
// notifications to. It is outside the daemon's link-port range (linkhost
// never picks it), so the hybrid socket <uds>_8442 of a user-space vsock
// device is never a link socket.
const Port = 8442

// MaxMessage bounds one notification: systemd's own messages are a line
// or two (READY=1, X_SYSTEMD_UNIT_ACTIVE=<unit>); a connection that sends
// more is closed unread.
const MaxMessage = 4096

// maxFields bounds the assignments of one message.
const maxFields = 64

// Credential returns the SMBIOS type 11 OEM string that gives a guest's
// systemd the notification address vsock-stream:2:<port>. The stream form
// is the one chosen: systemd's plain "vsock:" tries SOCK_DGRAM, then
// SOCK_SEQPACKET, which the virtio transport offers only with
// VIRTIO_VSOCK_F_SEQPACKET, and guestlink's user-space device speaks
// SOCK_STREAM only. Over a stream, systemd connects, writes one message,
// shuts its side down and waits for the host to close.
func Credential(port uint32) string {
	return "io.systemd.credential:vmm.notify_socket=vsock-stream:2:" + strconv.FormatUint(uint64(port), 10)
}

// ErrMalformed is the kind of every parse error: the message is not a
// notification, and the connection that carried it is closed.
var ErrMalformed = errors.New("malformed notification")

// Message is one notification: its newline-separated KEY=VALUE
// assignments, in order (a key may repeat; the last one counts).
type Message struct {
	Fields []Field
}

// Field is one assignment of a Message.
type Field struct {
	Key, Value string
}

// Get returns the value of the last assignment of key, and whether there is
// one.
func (m Message) Get(key string) (string, bool) {
	for i := len(m.Fields) - 1; i >= 0; i-- {
		if m.Fields[i].Key == key {
			return m.Fields[i].Value, true
		}
	}
	return "", false
}

// Ready reports whether the message declares the system ready (READY=1).
func (m Message) Ready() bool { v, _ := m.Get("READY"); return v == "1" }

// Stopping reports whether the message says the system begins to shut down
// (STOPPING=1). It is only what it says: the guest still runs.
func (m Message) Stopping() bool { v, _ := m.Get("STOPPING"); return v == "1" }

// Parse parses one notification as systemd sends it: UTF-8 text of at most
// MaxMessage bytes, assignments KEY=VALUE separated by newlines (a final
// newline and empty lines are allowed), keys of upper-case letters, digits
// and underscores starting with a letter, values without NUL or control
// characters other than tab. Anything else is ErrMalformed; an empty message
// (no assignment) too.
func Parse(b []byte) (Message, error) {
	if len(b) > MaxMessage {
		return Message{}, fmt.Errorf("%w: %d bytes, at most %d", ErrMalformed, len(b), MaxMessage)
	}
	if !utf8.Valid(b) {
		return Message{}, fmt.Errorf("%w: not UTF-8", ErrMalformed)
	}
	var m Message
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		if len(line) == 0 {
			continue
		}
		k, v, ok := bytes.Cut(line, []byte{'='})
		if !ok {
			return Message{}, fmt.Errorf("%w: a line without '='", ErrMalformed)
		}
		if !validKey(k) {
			return Message{}, fmt.Errorf("%w: key %q", ErrMalformed, truncate(k))
		}
		for _, r := range string(v) {
			if r < 0x20 && r != '\t' || r == 0x7f {
				return Message{}, fmt.Errorf("%w: control character in the value of %s", ErrMalformed, k)
			}
		}
		if len(m.Fields) == maxFields {
			return Message{}, fmt.Errorf("%w: more than %d assignments", ErrMalformed, maxFields)
		}
		m.Fields = append(m.Fields, Field{Key: string(k), Value: string(v)})
	}
	if len(m.Fields) == 0 {
		return Message{}, fmt.Errorf("%w: no assignment", ErrMalformed)
	}
	return m, nil
}

// validKey reports whether k is a notification key: A-Z first, then A-Z,
// 0-9 and '_', at most 64 bytes.
func validKey(k []byte) bool {
	if len(k) == 0 || len(k) > 64 || k[0] < 'A' || k[0] > 'Z' {
		return false
	}
	for _, c := range k {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// truncate shortens a key for an error message.
func truncate(k []byte) string {
	if len(k) > 32 {
		return string(k[:32]) + "..."
	}
	return string(k)
}
