package qemuvm

import (
	"fmt"

	"github.com/guestlink/guestlink/link/ringproto"
	"github.com/guestlink/guestlink/link/serialmux"
)

// Layout is the set of virtio-serial ports a QEMU backend gives its guests.
// It is part of the guest's saved state: QEMU cannot restore a state saved
// under another layout.
type Layout string

// Layouts.
const (
	// LayoutCurrent wires com.canonical.lxd to the ring buffer and adds an
	// unwired org.linuxcontainers.lxd port for old in-guest loaders.
	LayoutCurrent Layout = "current"
	// LayoutLegacy wires org.linuxcontainers.lxd to the ring buffer and has
	// no com.canonical.lxd port (VMs started by older hosts).
	LayoutLegacy Layout = "legacy"
)

// RingPort returns the name of the port wired to the ring buffer.
func (l Layout) RingPort() string {
	if l == LayoutLegacy {
		return ringproto.PortLegacy
	}
	return ringproto.PortCurrent
}

// Describe names the layout and its wired port for error messages.
func (l Layout) Describe() string {
	return fmt.Sprintf("%s layout (ring buffer on %s)", l, l.RingPort())
}

// Valid reports whether l is a known layout.
func (l Layout) Valid() bool { return l == LayoutCurrent || l == LayoutLegacy }

// Chardev and device ids (stable: they are part of the saved state and the
// daemon-visible port events).
const (
	serialBusID  = "dev-qemu_serial"
	RingChardev  = "vserial" // the ringbuf chardev, as in LXD
	ringPortID   = "dev-qemu_serial-ring"
	legacyPortID = "dev-qemu_serial-legacy"
	linkChardev  = "vlink"
	linkPortID   = "dev-qemu_serial-link"
	RingSize     = 16 // bytes, as in LXD
)

// port is one virtserialport.
type port struct {
	nr      int
	name    string
	id      string
	chardev string // "" for an unwired port
}

// ports returns the virtio-serial ports of a guest with layout l; withLink
// adds the serial-link port.
func (l Layout) ports(withLink bool) []port {
	var ps []port
	if l == LayoutLegacy {
		ps = append(ps, port{nr: 1, name: ringproto.PortLegacy, id: ringPortID, chardev: RingChardev})
	} else {
		ps = append(ps,
			port{nr: 1, name: ringproto.PortCurrent, id: ringPortID, chardev: RingChardev},
			port{nr: 2, name: ringproto.PortLegacy, id: legacyPortID})
	}
	if withLink {
		ps = append(ps, port{nr: 3, name: serialmux.PortName, id: linkPortID, chardev: linkChardev})
	}
	return ps
}
