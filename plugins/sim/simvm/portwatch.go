package simvm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"os"
	"syscall"
)

// PortChange is the data of EventPortChange, like QEMU's VSERPORT_CHANGE.
type PortChange struct {
	Port string `json:"port"`
	Open bool   `json:"open"`
}

// portWatch reports guest opens and closes of a port FIFO through inotify.
type portWatch struct {
	f    *os.File
	port string
}

// inotifyInit creates the inotify instance of a port watch; a variable so
// tests can make it fail as an exhausted per-user limit does.
var inotifyInit = func() (int, error) {
	return syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
}

// errNoInotify is the kind of watchPort's error when the kernel has no
// inotify instance or watch left for this user (fs.inotify.max_user_instances,
// default 128, or max_user_watches): the VMM then runs without port events.
var errNoInotify = errors.New("inotify limit reached")

// watchPort starts watching the FIFO of port: every open by the guest and
// every close after writing becomes an EventPortChange. The VMM's own
// read-write handle is opened before the watch, so it is never reported.
func (v *vmm) watchPort(port string) (*portWatch, error) {
	fd, err := inotifyInit()
	if err != nil {
		return nil, fmt.Errorf("watching port %s: %w", port, inotifyError(err))
	}
	if _, err := syscall.InotifyAddWatch(fd, v.paths.Port(port), syscall.IN_OPEN|syscall.IN_CLOSE_WRITE); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("watching port %s: %w", port, inotifyError(err))
	}
	return &portWatch{f: os.NewFile(uintptr(fd), "inotify"), port: port}, nil
}

// inotifyError marks the errors of an exhausted limit with errNoInotify.
func inotifyError(err error) error {
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.ENFILE) {
		return fmt.Errorf("%w: %w", errNoInotify, err)
	}
	return err
}

// run emits port changes until the watch is closed.
func (w *portWatch) run(v *vmm) {
	buf := make([]byte, 4096)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				log.Printf("watching port %s: %v", w.port, err)
			}
			return
		}
		// struct inotify_event { int wd; uint32 mask, cookie, len; char name[len]; }
		for off := 0; off+16 <= n; {
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			off += 16 + nameLen
			switch {
			case mask&syscall.IN_OPEN != 0:
				v.emit(EventPortChange, PortChange{Port: w.port, Open: true}, EventPortChange+"/open")
			case mask&syscall.IN_CLOSE_WRITE != 0:
				v.emit(EventPortChange, PortChange{Port: w.port, Open: false}, EventPortChange+"/close")
			}
		}
	}
}

func (w *portWatch) close() { w.f.Close() }
