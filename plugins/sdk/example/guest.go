package example

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// A guest's files, all under its directory: what the agent needs to run in
// a guest that is a host process (docs/plugins.md, "What the agent needs").
//
//	$GUESTLINK_PLUGIN_DATA_DIR/example/<uuid>/ (without it, <temp dir>/example-<uuid>/)
//	  link.sock                            the hybrid link: the agent listens on it,
//	                                       the daemon listens beside it on link.sock_<port>
//	  root/                                the guest's root (GUESTLINK_AGENT_ROOT)
//	    run/guestlink-agent/               the config drive: GuestSpec.Files
//	    dev/virtio-ports/com.canonical.lxd the ring port, a FIFO the plugin reads
//	    dev/lxd/sock                       devlxd, made by the agent

// ringPort is the name of the agent's ring port.
const ringPort = "com.canonical.lxd"

// maxRing is how many unread ring bytes the plugin keeps for a guest; older
// bytes are dropped (a ring buffer, as QEMU's ringbuf).
const maxRing = 4096

// paths are the files of the guest with uuid.
type paths struct{ dir string }

// guestPaths returns the files of the guest uuid: under the daemon's
// plugin data directory, in a subdirectory named after the plugin, or in
// the temporary directory when the plugin runs without one (a test).
func guestPaths(uuid string) paths {
	if d := os.Getenv(sdk.DataDirEnv); d != "" {
		return paths{filepath.Join(d, Name, uuid)}
	}
	return paths{filepath.Join(os.TempDir(), "example-"+uuid)}
}

func (p paths) link() string      { return filepath.Join(p.dir, "link.sock") }
func (p paths) root() string      { return filepath.Join(p.dir, "root") }
func (p paths) configDir() string { return filepath.Join(p.root(), "run", "guestlink-agent") }
func (p paths) ring() string      { return filepath.Join(p.root(), "dev", "virtio-ports", ringPort) }
func (p paths) devlxd() string    { return filepath.Join(p.root(), "dev", "lxd", "sock") }

// check refuses a guest whose socket paths would be too long for Linux,
// counting the daemon's link.sock_65535.
func (p paths) check() error {
	for _, s := range []string{p.link() + "_65535", p.devlxd()} {
		if len(s) > sdk.MaxSocketPath {
			return fmt.Errorf("socket path %s is %d bytes, over %d: use a shorter TMPDIR: %w", s, len(s), sdk.MaxSocketPath, sdk.ErrInvalid)
		}
	}
	return nil
}

// prepare makes the guest's root for a boot: the config drive with the
// daemon's files, the ring port, no stale link socket.
func (p paths) prepare(files []sdk.File) error {
	for _, d := range []string{p.configDir(), filepath.Dir(p.ring())} { // and the guest's directory
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	for _, f := range files {
		if !filepath.IsLocal(f.Path) {
			return fmt.Errorf("config drive file %q is not a relative path inside the drive: %w", f.Path, sdk.ErrInvalid)
		}
		dst := filepath.Join(p.configDir(), filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(dst, f.Data, os.FileMode(f.Mode&0o777)); err != nil {
			return err
		}
		if err := os.Chmod(dst, os.FileMode(f.Mode&0o777)); err != nil { // an existing file keeps its mode otherwise
			return err
		}
	}
	if err := syscall.Mkfifo(p.ring(), 0o600); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("making the ring port: %w", err)
	}
	if err := os.Remove(p.link()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// agentEnv is what the guest's command gets besides PATH: the agent and
// where its guest is.
func (b *Backend) agentEnv(p paths) ([]string, error) {
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	return []string{
		"GUESTLINK_AGENT=" + b.agent,
		"GUESTLINK_AGENT_ROOT=" + p.root(),
		"GUESTLINK_AGENT_LINK=hybrid:" + p.link(),
		// A process has no kernel boot id: a fresh one per boot.
		fmt.Sprintf("GUESTLINK_AGENT_BOOT_ID=%x-%x-%x-%x-%x", id[0:4], id[4:6], id[6:8], id[8:10], id[10:]),
	}, nil
}

// ring is the plugin's reader of one guest's ring port: it holds the FIFO
// open (so the agent's writes never find it unread), keeps the last
// maxRing bytes and wakes the daemon with EventRingData.
type ring struct {
	f    *os.File
	mu   sync.Mutex
	data []byte
}

// openRing starts reading the ring port of the guest uuid, once per
// plugin process (also for a guest adopted by Recover).
func (b *Backend) openRing(uuid string) (*ring, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.rings[uuid]; r != nil {
		return r, nil
	}
	// O_RDWR: opening a FIFO never blocks then, and the read end stays
	// open between the agent's writes.
	f, err := os.OpenFile(guestPaths(uuid).ring(), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the ring port: %w", err)
	}
	r := &ring{f: f}
	b.rings[uuid] = r
	go func() {
		buf := make([]byte, 512)
		for {
			n, err := f.Read(buf)
			if n > 0 {
				r.mu.Lock()
				r.data = append(r.data, buf[:n]...)
				if over := len(r.data) - maxRing; over > 0 {
					r.data = r.data[over:]
				}
				r.mu.Unlock()
				b.events.Emit(sdk.Event{UUID: uuid, Kind: sdk.EventRingData, Time: time.Now()})
			}
			if err != nil {
				return // closed by closeRing
			}
		}
	}()
	return r, nil
}

// closeRing stops reading the guest's ring port.
func (b *Backend) closeRing(uuid string) {
	b.mu.Lock()
	r := b.rings[uuid]
	delete(b.rings, uuid)
	b.mu.Unlock()
	if r != nil {
		r.f.Close()
	}
}

// take returns and consumes up to max unread bytes.
func (r *ring) take(max int) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := min(max, len(r.data))
	out := append([]byte(nil), r.data[:n]...)
	r.data = r.data[n:]
	return out
}

// readRing reads the ring of a running guest.
func (b *Backend) readRing(_ context.Context, hd *handle, max int) ([]byte, error) {
	if !hd.running() {
		return nil, nil // a stopped guest's ring is empty
	}
	r, err := b.openRing(hd.UUID)
	if err != nil {
		return nil, fmt.Errorf("reading the ring of guest %q: %w", hd.Name, err)
	}
	return r.take(max), nil
}
