package sdk

import (
	"context"

	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// The names below re-export package contract (plugins/sdk/contract), where
// the plugin contract's plain Go types, constants and error kinds live and
// are documented. Each is an alias, not a copy: an sdk.Info is a
// contract.Info, errors.Is matches sdk.ErrNotFound and contract.ErrNotFound
// alike, and a Backend written against either is the other.

// Handle is contract.Handle, a plugin's opaque reference to one guest.
type Handle = contract.Handle

// Capability is contract.Capability, a minor feature a backend may support.
type Capability = contract.Capability

// Info is contract.Info, what a backend says about itself.
type Info = contract.Info

// ConfigKey is contract.ConfigKey, one instance config key a backend
// declares.
type ConfigKey = contract.ConfigKey

// ConfigType is contract.ConfigType, the kind of a config key's value.
type ConfigType = contract.ConfigType

// Missing is contract.Missing, one thing a backend needs from the host and
// does not find.
type Missing = contract.Missing

// File is contract.File, one file of a guest's config drive.
type File = contract.File

// Device is contract.Device, one device of a guest.
type Device = contract.Device

// GuestSpec is contract.GuestSpec, what the daemon tells a backend about a
// guest.
type GuestSpec = contract.GuestSpec

// Image is contract.Image, a disk image of the host's image store.
type Image = contract.Image

// Status is contract.Status, a guest's coarse state as the backend sees it.
type Status = contract.Status

// GuestState is contract.GuestState, what a backend reports about a guest.
type GuestState = contract.GuestState

// StopOptions is contract.StopOptions, how to stop a guest.
type StopOptions = contract.StopOptions

// EventKind is contract.EventKind, the kind of a backend event.
type EventKind = contract.EventKind

// ExitKind is contract.ExitKind, how a guest's process ended.
type ExitKind = contract.ExitKind

// Event is contract.Event, something that happened to a guest.
type Event = contract.Event

// LinkKind is contract.LinkKind, a guest-link transport.
type LinkKind = contract.LinkKind

// LinkEndpoint is contract.LinkEndpoint, how the daemon reaches a guest's
// agent.
type LinkEndpoint = contract.LinkEndpoint

// Backend is contract.Backend, the interface a plugin implements.
type Backend = contract.Backend

// DeviceHotplugger is contract.DeviceHotplugger, the optional interface of
// a backend that changes a running guest's devices (CapHotplug).
type DeviceHotplugger = contract.DeviceHotplugger

// RingRead is contract.RingRead, one guest's read in a ReadRings batch.
type RingRead = contract.RingRead

// RingData is contract.RingData, the outcome of one RingRead.
type RingData = contract.RingData

// RingBatchReader is contract.RingBatchReader, the optional interface of a
// backend that reads many guests' rings in one call.
type RingBatchReader = contract.RingBatchReader

// SnapshotInfo is contract.SnapshotInfo, what a backend stored for a
// snapshot.
type SnapshotInfo = contract.SnapshotInfo

// RestoreOptions is contract.RestoreOptions, how to restore a snapshot.
type RestoreOptions = contract.RestoreOptions

// Snapshotter is contract.Snapshotter, implemented by backends that
// announce CapSnapshot.
type Snapshotter = contract.Snapshotter

// Adopter is contract.Adopter, implemented by backends that announce
// CapMove.
type Adopter = contract.Adopter

// Capabilities a backend can announce in Info (contract.Cap*).
const (
	CapStateful         = contract.CapStateful
	CapLinkHybrid       = contract.CapLinkHybrid
	CapLinkVsock        = contract.CapLinkVsock
	CapLinkSerial       = contract.CapLinkSerial
	CapRingBuffer       = contract.CapRingBuffer
	CapRingPush         = contract.CapRingPush
	CapRecover          = contract.CapRecover
	CapHotplug          = contract.CapHotplug
	CapDisk             = contract.CapDisk
	CapNICUser          = contract.CapNICUser
	CapSnapshot         = contract.CapSnapshot
	CapSnapshotStateful = contract.CapSnapshotStateful
	CapMove             = contract.CapMove
)

// Config key types (contract.Config*).
const (
	ConfigString   = contract.ConfigString
	ConfigInt      = contract.ConfigInt
	ConfigBool     = contract.ConfigBool
	ConfigDuration = contract.ConfigDuration
	ConfigSize     = contract.ConfigSize
	ConfigPath     = contract.ConfigPath
	ConfigEnum     = contract.ConfigEnum
)

// Instance types a backend declares in Info.InstanceType
// (contract.InstanceType*).
const (
	InstanceTypeContainer = contract.InstanceTypeContainer
	InstanceTypeVM        = contract.InstanceTypeVM
)

// Guest statuses (contract.Status*).
const (
	StatusUnknown = contract.StatusUnknown
	StatusStopped = contract.StatusStopped
	StatusRunning = contract.StatusRunning
	StatusError   = contract.StatusError
)

// Backend event kinds (contract.Event*).
const (
	EventUnknown    = contract.EventUnknown
	EventExited     = contract.EventExited
	EventReset      = contract.EventReset
	EventPortOpened = contract.EventPortOpened
	EventPortClosed = contract.EventPortClosed
	EventRingData   = contract.EventRingData
	EventError      = contract.EventError
)

// Exit kinds (contract.Exit*).
const (
	ExitUnspecified = contract.ExitUnspecified
	ExitPoweroff    = contract.ExitPoweroff
	ExitCrash       = contract.ExitCrash
)

// Link kinds (contract.Link*).
const (
	LinkHybrid = contract.LinkHybrid
	LinkVsock  = contract.LinkVsock
	LinkSerial = contract.LinkSerial
)

// Keys, names and limits of the contract (documented in package contract).
const (
	// KeyVolumePath is contract.KeyVolumePath.
	KeyVolumePath = contract.KeyVolumePath
	// MaxRingReads is contract.MaxRingReads.
	MaxRingReads = contract.MaxRingReads
	// DataDirEnv is contract.DataDirEnv.
	DataDirEnv = contract.DataDirEnv
	// MaxSocketPath is contract.MaxSocketPath.
	MaxSocketPath = contract.MaxSocketPath
	// AgentEnv is contract.AgentEnv.
	AgentEnv = contract.AgentEnv
	// AgentFile is contract.AgentFile.
	AgentFile = contract.AgentFile
	// AgentFileCert is contract.AgentFileCert.
	AgentFileCert = contract.AgentFileCert
	// AgentFileKey is contract.AgentFileKey.
	AgentFileKey = contract.AgentFileKey
	// AgentFileServerCert is contract.AgentFileServerCert.
	AgentFileServerCert = contract.AgentFileServerCert
	// AgentFileConf is contract.AgentFileConf.
	AgentFileConf = contract.AgentFileConf
)

// Error kinds a plugin returns (contract.Err*): the same values, so
// errors.Is matches either name.
var (
	ErrNotFound     = contract.ErrNotFound
	ErrInvalid      = contract.ErrInvalid
	ErrConflict     = contract.ErrConflict
	ErrNotSupported = contract.ErrNotSupported
	ErrUnavailable  = contract.ErrUnavailable
)

// MissingText is contract.MissingText: everything a backend lacks in one
// sentence that names the fix.
func MissingText(ms []Missing) string { return contract.MissingText(ms) }

// LinkCapability is contract.LinkCapability: the capability that announces
// link kind k.
func LinkCapability(k LinkKind) Capability { return contract.LinkCapability(k) }

// CheckLinkEndpoint is contract.CheckLinkEndpoint: the link rule the
// daemon and the conformance kit share.
func CheckLinkEndpoint(info *Info, ep *LinkEndpoint) error {
	return contract.CheckLinkEndpoint(info, ep)
}

// AgentPath is contract.AgentPath: the guestlink-agent binary a plugin runs
// in guests that are host processes.
func AgentPath(exe string) string { return contract.AgentPath(exe) }

// ReadRings is contract.ReadRings: a batch read with b's ReadRings when it
// has one, else one ReadRing per read.
func ReadRings(ctx context.Context, b Backend, reads []RingRead) []RingData {
	return contract.ReadRings(ctx, b, reads)
}
