// Package ringwriter is the guest side of the ring: the agent's writer of
// its state words (link/ringproto) to the virtio-serial port wired to the
// host's ring buffer. The hypervisor side that keeps the bytes is
// plugins/shared/ringbuffer (for the sim; QEMU's ringbuf chardev for QEMU).
package ringwriter

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/guestlink/guestlink/link/ringproto"
)

// DefaultTimeout bounds one Write when Writer.Timeout is zero.
const DefaultTimeout = 2 * time.Second

// ErrNoPort is returned when neither port name exists.
var ErrNoPort = errors.New("no ring-buffer port")

// Writer writes words to <Dir>/com.canonical.lxd, or to
// <Dir>/org.linuxcontainers.lxd when only the legacy port exists. Every
// Write opens the port (O_WRONLY|O_NONBLOCK), writes "WORD\n" and closes it,
// so that it never holds the port open. A Writer is safe for concurrent use;
// writes are serialised.
type Writer struct {
	// Dir is the virtio-ports directory (<root>/dev/virtio-ports).
	Dir string
	// Timeout bounds one Write, retries included (DefaultTimeout if zero).
	Timeout time.Duration

	mu sync.Mutex
}

// Port returns the path of the port a Write would use now: the current port
// if it exists, else the legacy one if it exists.
func (w *Writer) Port() (string, error) {
	cur := filepath.Join(w.Dir, ringproto.PortCurrent)
	if _, err := os.Stat(cur); err == nil {
		return cur, nil
	}
	legacy := filepath.Join(w.Dir, ringproto.PortLegacy)
	if _, err := os.Stat(legacy); err == nil {
		return legacy, nil
	}
	return "", fmt.Errorf("%w: neither %s nor %s exists in %s", ErrNoPort, ringproto.PortCurrent, ringproto.PortLegacy, w.Dir)
}

// Write writes word to the port. It never blocks longer than the timeout: an
// unwired port (ENXIO: no reader yet) is retried until then, a full one is
// abandoned at the write deadline.
func (w *Writer) Write(word ringproto.Word) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	timeout := w.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	deadline := time.Now().Add(timeout)
	path, err := w.Port()
	if err != nil {
		return fmt.Errorf("writing %s to ring: %w", word, err)
	}
	var f *os.File
	// A port without a host side yet (ENXIO) or held by another writer
	// (EBUSY) is tried again after 10 ms, doubling up to 200 ms, no jitter.
	bo := &backoff.ExponentialBackOff{InitialInterval: 10 * time.Millisecond, Multiplier: 2, MaxInterval: 200 * time.Millisecond}
	for {
		f, err = os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC|syscall.O_NOCTTY, 0)
		if err == nil {
			break
		}
		delay := bo.NextBackOff()
		if !errors.Is(err, syscall.ENXIO) && !errors.Is(err, syscall.EBUSY) || time.Now().Add(delay).After(deadline) {
			return fmt.Errorf("writing %s to ring port %s: %w", word, path, err)
		}
		time.Sleep(delay)
	}
	defer f.Close()
	// Character devices and FIFOs are pollable: the deadline bounds a write
	// to a port whose host side does not drain it.
	_ = f.SetWriteDeadline(deadline)
	if _, err := f.Write(ringproto.Format(word)); err != nil {
		return fmt.Errorf("writing %s to ring port %s: %w", word, path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing ring port %s: %w", path, err)
	}
	return nil
}
