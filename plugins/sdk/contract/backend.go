// Package contract is the plugin contract in plain Go: the Backend interface
// a plugin implements and the daemon calls, its optional interfaces
// (Snapshotter, Adopter, DeviceHotplugger, RingBatchReader), the values that
// cross the boundary (Info, GuestSpec, GuestState, Event, LinkEndpoint, ...),
// the capabilities, the error kinds and what a guest's agent needs from its
// backend. It imports neither gRPC, the protobuf runtime nor go-plugin, so
// the daemon's services program against it without linking the transport
// (internal/deptest checks both).
//
// Package sdk (the parent) carries the contract over gRPC: Serve on the
// plugin side, Launch and Client on the daemon's, the handshake and the
// protobuf converters. It re-exports every name of this package, so a
// plugin author imports sdk alone.
//
// The daemon drives a Backend through this lifecycle for each guest:
//
//	Create -> Start -> (ReadRing, LinkEndpoint, State)* -> Stop -> (Start ...)* -> Delete
//
// and calls Recover for every stored handle after the daemon or the plugin
// restarted. Guests must outlive the plugin process: a plugin starts each
// guest (its VMM) in a session of its own and keeps everything it needs to
// find it again in the handle.
package contract

import (
	"context"
	"slices"
	"strings"
	"time"
)

// Handle is a plugin's opaque reference to one guest. The daemon stores it
// verbatim and passes it back; plugins usually marshal a small JSON document.
type Handle []byte

// Capability names a minor feature a backend may support.
type Capability string

// Capabilities a backend can announce in Info.
const (
	CapStateful   Capability = "stateful"    // Stop with Stateful, Start with RestoreState
	CapLinkHybrid Capability = "link-hybrid" // LinkEndpoint may return LinkHybrid
	CapLinkVsock  Capability = "link-vsock"  // LinkEndpoint may return LinkVsock
	CapLinkSerial Capability = "link-serial" // LinkEndpoint may return LinkSerial
	CapRingBuffer Capability = "ring-buffer" // ReadRing works
	CapRecover    Capability = "recover"     // Recover re-attaches to running guests
	CapHotplug    Capability = "hotplug.v1"  // the backend implements DeviceHotplugger
	// CapRingPush: while an Events stream is open, the backend drains each
	// guest's ring into its EventRingData events (Event.Ring, RingSeq),
	// including bytes already in the ring when the stream opened, and
	// ReadRing returns nothing; the daemon then makes no ReadRing call for
	// a heartbeat.
	CapRingPush Capability = "ring-push"
	// CapDisk: Create and Start honour GuestSpec.Image, keeping a writable
	// layer of the guest's own on the image (removed by Delete).
	CapDisk Capability = "disk.v1"
	// CapNICUser: nic devices with nictype=user (user-mode networking with
	// host port forwards) are realised.
	CapNICUser Capability = "nic.user.v1"
)

// KeyVolumePath is the key the daemon adds to a disk device's config: the
// host file of its storage volume (raw).
const KeyVolumePath = "volume.path"

// DeviceHotplugger is the optional interface of a Backend that changes the
// devices of a running guest (capability CapHotplug). A backend without it
// answers ErrNotSupported (gRPC Unimplemented) through Serve.
type DeviceHotplugger interface {
	// UpdateDevices adds (or replaces) the devices in add and removes those
	// named in remove on the running guest h, and returns once the guest
	// has them (a removal once the guest released the device). A stopped
	// guest is ErrConflict; a device type the backend cannot hot-plug is
	// ErrNotSupported.
	UpdateDevices(ctx context.Context, h Handle, add map[string]Device, remove []string) error
}

// Info describes a backend.
type Info struct {
	Name           string
	Version        string
	Capabilities   []Capability
	ConfigPrefixes []string // config key prefixes the backend owns, e.g. "sim."
	// InstanceType is what a guest of this backend is, as devlxd reports it:
	// InstanceTypeContainer or InstanceTypeVM; empty means InstanceTypeVM.
	InstanceType string
	// Missing lists what the backend needs from the host and cannot find
	// there (programs, firmware files). Look it up at every Info, cheaply
	// (a PATH lookup, a stat), so that a package installed meanwhile is
	// seen at the next health ping. A backend that lists anything cannot
	// run guests: the daemon shows it "unhealthy" naming what is missing
	// and refuses to create or start guests on it, before anything is
	// made. Empty means usable; plugins built before the field never set
	// it.
	Missing []Missing
	// ConfigSchema lists every instance config key the backend understands
	// under its ConfigPrefixes (after Nomad's plugins/base ConfigSchema).
	// The daemon refuses a key under an owned prefix that is not listed,
	// on create and on config set, before it calls the plugin, and
	// guestlink backends info NAME shows the list. Empty means not
	// declared (plugins built before it): the daemon then leaves those
	// keys to Create, which must still check the values it is given.
	ConfigSchema []ConfigKey
}

// ConfigKey describes one instance config key a backend understands.
type ConfigKey struct {
	// Name is the full key with its prefix: "sim.command".
	Name string
	// Type is the kind of value, for people and tools (one of the
	// ConfigType constants); the backend checks values itself.
	Type ConfigType
	// Default is what an unset key means, as people read it: "16",
	// "auto" or a short phrase; "" when unset means nothing.
	Default string
	// Doc says what the key does, in one or a few sentences (markdown:
	// the docs' key tables are generated from it).
	Doc string
}

// ConfigType is the kind of a config key's value.
type ConfigType string

// Config key types.
const (
	ConfigString   ConfigType = "string"
	ConfigInt      ConfigType = "int"
	ConfigBool     ConfigType = "bool"
	ConfigDuration ConfigType = "duration" // Go's syntax: "1.5s"
	ConfigSize     ConfigType = "size"     // "256MiB", "1GiB"
	ConfigPath     ConfigType = "path"     // an absolute host path
	ConfigEnum     ConfigType = "enum"     // one of the words Doc names
)

// ConfigKey returns the schema entry of the config key name and whether
// the backend declares it.
func (i *Info) ConfigKey(name string) (ConfigKey, bool) {
	for _, k := range i.ConfigSchema {
		if k.Name == name {
			return k, true
		}
	}
	return ConfigKey{}, false
}

// OwnsConfigKey reports whether name lies under one of the backend's
// ConfigPrefixes (with something after the prefix).
func (i *Info) OwnsConfigKey(name string) bool {
	for _, p := range i.ConfigPrefixes {
		if p != "" && len(name) > len(p) && strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// ConfigKeyNames returns the names of the declared config keys in schema
// order.
func (i *Info) ConfigKeyNames() []string {
	names := make([]string, len(i.ConfigSchema))
	for n, k := range i.ConfigSchema {
		names[n] = k.Name
	}
	return names
}

// Missing is one thing a backend needs from the host and does not find.
type Missing struct {
	// What is missing, as a person looks for it: a program ("qemu-img") or
	// a file ("firmware bios-256k.bin").
	What string
	// Reason says how it was looked for: "not found in PATH".
	Reason string
	// Package is the Debian package that provides it, "" if none does.
	Package string
}

// String returns what is missing, why and its package:
// "qemu-img not found in PATH (Debian package qemu-utils)".
func (m Missing) String() string {
	s := m.What
	if m.Reason != "" {
		s += " " + m.Reason
	}
	if m.Package != "" {
		s += " (Debian package " + m.Package + ")"
	}
	return s
}

// MissingText describes everything a backend lacks in one sentence that
// names the fix: "qemu-img not found in PATH (Debian package qemu-utils);
// install: apt-get install qemu-utils". It returns "" for an empty list.
func MissingText(ms []Missing) string {
	if len(ms) == 0 {
		return ""
	}
	parts := make([]string, len(ms))
	var pkgs []string
	for i, m := range ms {
		parts[i] = m.String()
		if m.Package != "" && !slices.Contains(pkgs, m.Package) {
			pkgs = append(pkgs, m.Package)
		}
	}
	s := strings.Join(parts, "; ")
	if len(pkgs) > 0 {
		s += "; install: apt-get install " + strings.Join(pkgs, " ")
	}
	return s
}

// Instance types a backend declares in Info.InstanceType (LXD's names).
const (
	// InstanceTypeContainer is a guest sharing the host's kernel (a process).
	InstanceTypeContainer = "container"
	// InstanceTypeVM is a virtual machine with its own kernel.
	InstanceTypeVM = "virtual-machine"
)

// GuestInstanceType returns i.InstanceType, InstanceTypeVM when empty or
// unknown (an older plugin that does not declare it).
func (i *Info) GuestInstanceType() string {
	if i != nil && i.InstanceType == InstanceTypeContainer {
		return InstanceTypeContainer
	}
	return InstanceTypeVM
}

// Has reports whether the backend announced capability c.
func (i *Info) Has(c Capability) bool {
	for _, x := range i.Capabilities {
		if x == c {
			return true
		}
	}
	return false
}

// File is one file of a guest's config drive.
type File struct {
	Path string // relative, slash separated, e.g. "agent.crt"
	Mode uint32 // permission bits, e.g. 0o600
	Data []byte
}

// Device is one device of a guest: its configuration keys (always "type").
type Device map[string]string

// GuestSpec is what the daemon tells a backend about a guest.
type GuestSpec struct {
	Name         string
	UUID         string
	Config       map[string]string
	Devices      map[string]Device
	Files        []File // config drive content, rewritten at every start
	RestoreState bool   // boot from the state saved by a stateful stop
	// Image is the disk image the guest boots from, nil for none. Only
	// backends announcing CapDisk are given one.
	Image *Image
}

// Image is a disk image of the host's image store. Backends read it and
// never write it: a guest's writes go to a layer of its own (a qcow2
// overlay for the QEMU backends).
type Image struct {
	Fingerprint string // SHA-256 of the disk file, lowercase hex
	Path        string // absolute path of the disk file
	Format      string // "raw" or "qcow2"
	Kernel      string // absolute path of a kernel for direct boot taken from the image, or ""
	Initrd      string // absolute path of its initrd, or ""
}

// Status is a guest's coarse state as the backend sees it.
type Status int

// Guest statuses.
const (
	StatusUnknown Status = iota
	StatusStopped
	StatusRunning
	StatusError
)

// String returns the status name.
func (s Status) String() string {
	switch s {
	case StatusStopped:
		return "stopped"
	case StatusRunning:
		return "running"
	case StatusError:
		return "error"
	}
	return "unknown"
}

// GuestState is what a backend reports about a guest.
type GuestState struct {
	Status        Status
	PID           int64
	Message       string            // why, for StatusError
	Details       map[string]string // facts for users: "devlxd_socket", "accel", "layout"
	HasSavedState bool
}

// StopOptions says how to stop a guest.
type StopOptions struct {
	Timeout  time.Duration // graceful budget; 0 means the backend's default
	Force    bool          // kill at once
	Stateful bool          // save the guest's state (CapStateful)
}

// EventKind is the kind of a backend event.
type EventKind int

// Backend event kinds.
const (
	EventUnknown    EventKind = iota
	EventExited               // the guest process ended
	EventReset                // the guest rebooted, its process kept
	EventPortOpened           // the guest opened a serial port (Port)
	EventPortClosed           // the guest closed a serial port (Port)
	// EventRingData: the guest wrote to the agent ring buffer. Send it at
	// most every few tens of milliseconds per guest (the sim sends one per
	// 20 ms at most, QEMU none): a guest flooding its port must not become
	// a flood of events the daemon has to take.
	EventRingData
	EventError // a backend-side failure for this guest (Detail)
)

// String returns the event kind name.
func (k EventKind) String() string {
	return [...]string{"unknown", "exited", "reset", "port-opened", "port-closed", "ring-data", "error"}[k]
}

// ExitKind says how a guest's process ended (Event.Exit of an
// EventExited). The daemon shows the instance Stopped after ExitPoweroff
// and Error after ExitCrash, whatever Detail says (docs/plugins.md).
type ExitKind int

// Exit kinds.
const (
	// ExitUnspecified is an exit the backend did not classify (a plugin
	// built before ExitKind, or a process it only polls, whose status it
	// cannot know): the daemon reads it as ExitPoweroff, as it always
	// documented for EventExited.
	ExitUnspecified ExitKind = iota
	// ExitPoweroff is a guest that ended itself cleanly: it powered off
	// or halted (QEMU: a SHUTDOWN event with reason guest-shutdown, or
	// guest-reset under -no-reboot; sim: the guest command exited with
	// status 0).
	ExitPoweroff
	// ExitCrash is a guest whose process died: a guest panic (QEMU:
	// SHUTDOWN reason guest-panic), the VMM killed by a signal or ended
	// without a clean shutdown (no SHUTDOWN event, a host-side quit or
	// signal), a non-zero exit status, or a VMM that could not run it.
	ExitCrash
)

// String returns the exit kind's name.
func (k ExitKind) String() string {
	switch k {
	case ExitPoweroff:
		return "poweroff"
	case ExitCrash:
		return "crash"
	}
	return "unspecified"
}

// Event is something that happened to a guest.
type Event struct {
	UUID   string // the guest's GuestSpec.UUID
	Kind   EventKind
	Port   string
	Detail string // free text: the exit status, the error
	// Exit is how the guest ended, for EventExited: set it on every exit
	// (ExitPoweroff or ExitCrash); Detail says more but is never parsed.
	Exit ExitKind
	Time time.Time
	// Ring and RingSeq: for EventRingData from a backend with CapRingPush,
	// the bytes drained from the guest's ring as the event was sent (maybe
	// none) and their sequence number, from 1 and increasing per guest
	// (the daemon applies bytes in RingSeq order and drops older ones). A
	// zero RingSeq pushes nothing: the daemon reads the ring.
	Ring    []byte
	RingSeq uint64
	// Heartbeat marks an EventRingData whose Ring only repeats the word
	// the guest's agent last wrote, as a heartbeat does: it changes nothing
	// for the daemon, so EventBatches may hold it up to
	// sdk.EventHeartbeatLinger to send it with others (any other event goes
	// at once, with the held ones before it). Never set it on bytes that
	// could change the agent's state.
	Heartbeat bool
}

// LinkKind names a guest-link transport (see docs/guest-link.md).
type LinkKind string

// Link kinds.
const (
	LinkHybrid LinkKind = "hybrid" // Firecracker-style Unix sockets
	LinkVsock  LinkKind = "vsock"  // AF_VSOCK through vhost-vsock
	LinkSerial LinkKind = "serial" // multiplexed over a virtio-serial port
)

// LinkEndpoint tells the daemon how to reach a guest's agent.
type LinkEndpoint struct {
	Kind LinkKind
	// Path: for LinkHybrid the VMM's socket (the daemon dials it with
	// "CONNECT <port>\n" and listens on Path+"_"+port); for LinkSerial the
	// chardev's Unix socket; for LinkVsock, when set, the hybrid socket of
	// a user-space vsock device (the guest uses AF_VSOCK, the daemon this
	// socket as for LinkHybrid; docs/vsock.md).
	Path string
	CID  uint32 // for LinkVsock, the guest CID
}

// Backend is the interface a plugin implements. Methods are called
// concurrently for different guests; each must honour ctx.
type Backend interface {
	// Info describes the backend. It is called after every start of the
	// plugin process and then as the daemon's health ping (every 5s, with a
	// 5s deadline; three missed pings in a row, over at least two
	// intervals, get the plugin killed and restarted), so it must answer
	// at once and from memory, without touching guests.
	Info(ctx context.Context) (*Info, error)
	// Create prepares a guest without starting it and returns its handle.
	// Unknown keys under the backend's own config prefixes are ErrInvalid.
	Create(ctx context.Context, spec *GuestSpec) (Handle, error)
	// Start boots the guest and returns its (possibly updated) handle once the
	// guest process runs. Starting a running guest is ErrConflict.
	Start(ctx context.Context, h Handle, spec *GuestSpec) (Handle, *GuestState, error)
	// Stop shuts the guest down and returns when its process has ended.
	// Stopping a stopped guest succeeds.
	Stop(ctx context.Context, h Handle, opts StopOptions) (*GuestState, error)
	// Delete removes a stopped guest and all it owns. Deleting a running guest
	// is ErrConflict; deleting an unknown one succeeds.
	Delete(ctx context.Context, h Handle) error
	// State reports the guest's state.
	State(ctx context.Context, h Handle) (*GuestState, error)
	// Events streams events for all guests until ctx ends; the channel is
	// closed then. The daemon opens one stream per plugin process.
	Events(ctx context.Context) (<-chan Event, error)
	// ReadRing reads and consumes up to max bytes of the guest's ring buffer.
	// An empty ring returns no bytes and no error.
	ReadRing(ctx context.Context, h Handle, max int) ([]byte, error)
	// LinkEndpoint tells how to reach the running guest's agent.
	LinkEndpoint(ctx context.Context, h Handle) (*LinkEndpoint, error)
	// Recover re-attaches to a guest after a daemon or plugin restart and
	// reports its state. It is called for every stored handle, running or
	// not, and must be idempotent.
	Recover(ctx context.Context, h Handle, spec *GuestSpec) (Handle, *GuestState, error)
}
