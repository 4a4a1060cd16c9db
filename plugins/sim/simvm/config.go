// Package simvm is the simulated virtual machine monitor of the sim backend:
// a small process, started in a session of its own, that owns one guest's
// directory, builds a stand-in root with virtio-serial ports as named FIFOs
// and a config drive, runs the guest command, buffers the agent's port in a
// QEMU-style ring buffer and answers a QMP-like JSON-lines protocol on a
// control socket. The package also holds the client of that protocol and
// Launch, which starts a VMM process.
//
// Files by concern: vmm.go (VMM supervision: Main, Run, the guest process,
// shutdown), rootfs.go (the stand-in root and boot id), control.go (the
// control socket: connections, commands, event writers), ring.go (ring
// buffer reads of the agent's port and ring-data events), protocol.go
// (the wire types), client.go, launch.go, portwatch.go, strays.go.
package simvm

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// Layout is a serial port layout: which virtio-serial ports exist and which
// one is wired to the ring buffer.
type Layout string

// Serial layouts (see the guest-link spec, section 2).
const (
	// LayoutCurrent wires com.canonical.lxd to the ring buffer and adds an
	// unwired org.linuxcontainers.lxd port.
	LayoutCurrent Layout = "current"
	// LayoutLegacy has only org.linuxcontainers.lxd, wired to the ring buffer.
	LayoutLegacy Layout = "legacy"
)

// Serial port names.
const (
	PortCurrent = "com.canonical.lxd"
	PortLegacy  = "org.linuxcontainers.lxd"
)

// Valid reports whether l is a known layout.
func (l Layout) Valid() bool { return l == LayoutCurrent || l == LayoutLegacy }

// Ports returns the port wired to the ring buffer and the unwired ports of l.
func (l Layout) Ports() (wired string, unwired []string) {
	if l == LayoutLegacy {
		return PortLegacy, nil
	}
	return PortCurrent, []string{PortLegacy}
}

// Paths names the files of one guest directory.
type Paths struct {
	Dir string // the guest directory, absolute
}

// Root returns the guest's stand-in root directory.
func (p Paths) Root() string { return filepath.Join(p.Dir, "rootfs") }

// Port returns the FIFO of the virtio-serial port name.
func (p Paths) Port(name string) string {
	return filepath.Join(p.Root(), "dev", "virtio-ports", name)
}

// DevlxdSocket returns where the agent serves /dev/lxd/sock.
func (p Paths) DevlxdSocket() string { return filepath.Join(p.Root(), "dev", "lxd", "sock") }

// ConfigDrive returns the directory receiving the guest's config drive files.
func (p Paths) ConfigDrive() string { return filepath.Join(p.Root(), "run", "guestlink-agent") }

// Control returns the VMM's control socket.
func (p Paths) Control() string { return filepath.Join(p.Dir, "control.sock") }

// Link returns the hybrid link socket the agent listens on.
func (p Paths) Link() string { return filepath.Join(p.Dir, "link.sock") }

// SerialLink returns the socket the serial link's port is relayed to (the
// daemon connects to it, as to QEMU's socket chardev), when Config.Link is
// LinkSerial.
func (p Paths) SerialLink() string { return filepath.Join(p.Dir, "serial.sock") }

// Console returns the file receiving the guest command's stdout and stderr.
func (p Paths) Console() string { return filepath.Join(p.Dir, "console.log") }

// Lock returns the file a running VMM holds an exclusive flock on.
func (p Paths) Lock() string { return filepath.Join(p.Dir, "vmm.lock") }

// VMMLog returns the file receiving the VMM's own log.
func (p Paths) VMMLog() string { return filepath.Join(p.Dir, "vmm.log") }

// Config returns the VMM's configuration file, written before each start.
func (p Paths) Config() string { return filepath.Join(p.Dir, "vmm.json") }

// Exit returns the file where the VMM records how the guest ended.
func (p Paths) Exit() string { return filepath.Join(p.Dir, "exit.json") }

// File is one config drive file.
type File struct {
	Path string `json:"path"` // relative, slash separated
	Mode uint32 `json:"mode"` // permission bits
	Data []byte `json:"data"`
}

// Config is what a VMM needs to run a guest. The backend writes it as
// vmm.json (0600) into the guest directory before starting the VMM.
type Config struct {
	Name     string `json:"name"`
	UUID     string `json:"uuid"`
	Command  string `json:"command"`        // run with /bin/sh -c
	Agent    string `json:"agent"`          // path of guestlink-agent
	Layout   Layout `json:"layout"`         // serial layout
	RingSize int    `json:"ring_size"`      // ring buffer bytes, a power of two
	Link     string `json:"link,omitempty"` // LinkHybrid (default, "") or LinkSerial
	Files    []File `json:"files"`          // config drive
}

// ErrConfig is the kind of error for an invalid VMM configuration.
var ErrConfig = errors.New("invalid vmm configuration")

// Validate checks c, naming the first bad field.
func (c *Config) Validate() error {
	if c.Command == "" {
		return fmt.Errorf("%w: empty command", ErrConfig)
	}
	if !c.Layout.Valid() {
		return fmt.Errorf("%w: unknown layout %q", ErrConfig, c.Layout)
	}
	if c.Link != "" && c.Link != LinkHybrid && c.Link != LinkSerial {
		return fmt.Errorf("%w: unknown link %q", ErrConfig, c.Link)
	}
	for _, f := range c.Files {
		if err := ValidateFilePath(f.Path); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	return nil
}

// ValidateFilePath checks that p is a relative, clean, slash separated path
// that stays inside the config drive.
func ValidateFilePath(p string) error {
	switch {
	case p == "" || p == ".":
		return fmt.Errorf("config drive file path %q is empty", p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("config drive file path %q is absolute", p)
	case path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../"):
		return fmt.Errorf("config drive file path %q is not clean or leaves the drive", p)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("config drive file path %q contains NUL", p)
	}
	return nil
}

// WriteConfig writes c to the guest directory's vmm.json, readable only by
// its owner (it carries the agent's private key).
func WriteConfig(p Paths, c *Config) error {
	data, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encoding vmm configuration: %w", err)
	}
	return writeFileAtomic(p.Config(), data, 0o600)
}

// ReadConfig reads and validates the guest directory's vmm.json.
func ReadConfig(p Paths) (*Config, error) {
	data, err := os.ReadFile(p.Config())
	if err != nil {
		return nil, fmt.Errorf("reading vmm configuration: %w", err)
	}
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("decoding vmm configuration %s: %w", p.Config(), err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("vmm configuration %s: %w", p.Config(), err)
	}
	return &c, nil
}

// Exit reasons recorded in ExitRecord.Reason.
const (
	ReasonGuest     = "guest"     // the guest command ended by itself
	ReasonPowerdown = "powerdown" // it ended after a powerdown request
	ReasonQuit      = "quit"      // it was killed by quit (or a signal to the VMM)
	ReasonError     = "error"     // the VMM could not run it
)

// ExitRecord is how a guest ended, written by the VMM as exit.json before the
// VMM exits.
type ExitRecord struct {
	Reason   string    `json:"reason"`
	Status   string    `json:"status"`    // "exit status 0", "signal: killed"
	Code     int       `json:"exit_code"` // -1 when killed by a signal
	Message  string    `json:"message,omitempty"`
	Boot     int       `json:"boot"` // guest command starts in this VMM's life
	VMMPID   int       `json:"vmm_pid"`
	ExitedAt time.Time `json:"exited_at"`
}

// ReadExitRecord reads the guest directory's exit.json. A missing record is
// an error matching os.ErrNotExist.
func ReadExitRecord(p Paths) (*ExitRecord, error) {
	data, err := os.ReadFile(p.Exit())
	if err != nil {
		return nil, fmt.Errorf("reading exit record: %w", err)
	}
	var r ExitRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("decoding exit record %s: %w", p.Exit(), err)
	}
	return &r, nil
}

// WriteExitRecord writes r as the guest directory's exit.json.
func WriteExitRecord(p Paths, r *ExitRecord) error {
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding exit record: %w", err)
	}
	return writeFileAtomic(p.Exit(), data, 0o600)
}

func writeFileAtomic(name string, data []byte, mode os.FileMode) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if err := os.Rename(tmp, name); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}
