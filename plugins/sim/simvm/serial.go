package simvm

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Guest link kinds a VMM offers (Config.Link).
const (
	// LinkHybrid is the hybrid vsock socket link.sock (the default).
	LinkHybrid = "hybrid"
	// LinkSerial is the serial link: a virtio-serial port the guest opens
	// as <root>/dev/virtio-ports/SerialPort, carried to the Unix socket
	// serial.sock as QEMU's socket chardev carries it (link/serialmux
	// runs over it on both sides).
	LinkSerial = "serial"
)

// SerialPort is the virtio-serial port name of the serial link.
const SerialPort = "com.canonical.lxd.link"

// serialRelay is the VMM's side of the serial link. The guest's port is
// the slave of a pseudo-terminal in raw mode (<root>/dev/virtio-ports/
// SerialPort is a symlink to it): the one file a process can open for both
// reading and writing a byte stream, as a guest opens a virtio-serial port.
// The VMM copies between the master and the one client of serial.sock at a
// time (QEMU: server=on,wait=off); without a client the guest's bytes are
// dropped.
type serialRelay struct {
	master *os.File
	slave  *os.File // kept open so that the master never reads EIO when the guest closes its end
	ln     net.Listener
	link   string // the symlink in the guest's root

	mu      sync.Mutex
	client  net.Conn
	closing bool
	wg      sync.WaitGroup
}

// startSerial creates the pseudo-terminal, the port symlink and the
// listening socket, and starts relaying.
func startSerial(p Paths) (*serialRelay, error) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("serial link: opening /dev/ptmx: %w", err)
	}
	r := &serialRelay{master: master}
	fail := func(err error) (*serialRelay, error) {
		r.close()
		return nil, fmt.Errorf("serial link: %w", err)
	}
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		return fail(fmt.Errorf("unlocking pseudo-terminal: %w", err))
	}
	n, err := unix.IoctlGetUint32(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		return fail(fmt.Errorf("naming pseudo-terminal: %w", err))
	}
	pts := "/dev/pts/" + strconv.FormatUint(uint64(n), 10)
	if r.slave, err = os.OpenFile(pts, os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0); err != nil {
		return fail(fmt.Errorf("opening %s: %w", pts, err))
	}
	// Raw: no echo, no line editing, no translation, every byte as is.
	t, err := unix.IoctlGetTermios(int(r.slave.Fd()), unix.TCGETS)
	if err != nil {
		return fail(fmt.Errorf("reading terminal mode of %s: %w", pts, err))
	}
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON | unix.IXOFF
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(int(r.slave.Fd()), unix.TCSETS, t); err != nil {
		return fail(fmt.Errorf("setting raw mode on %s: %w", pts, err))
	}
	r.link = p.Port(SerialPort)
	_ = os.Remove(r.link)
	if err := os.Symlink(pts, r.link); err != nil {
		return fail(fmt.Errorf("linking the port: %w", err))
	}
	_ = os.Remove(p.SerialLink())
	old := syscall.Umask(0o177)
	r.ln, err = net.Listen("unix", p.SerialLink())
	syscall.Umask(old)
	if err != nil {
		return fail(fmt.Errorf("listening on %s: %w", p.SerialLink(), err))
	}
	r.wg.Add(2)
	go r.fromGuest()
	go r.accept()
	return r, nil
}

// fromGuest copies what the guest writes to the current client, or drops it.
func (r *serialRelay) fromGuest() {
	defer r.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.master.Read(buf)
		if n > 0 {
			r.mu.Lock()
			c := r.client
			r.mu.Unlock()
			if c != nil {
				if _, werr := c.Write(buf[:n]); werr != nil {
					c.Close()
				}
			}
		}
		if err != nil {
			r.mu.Lock()
			closing := r.closing
			r.mu.Unlock()
			if !closing && !errors.Is(err, os.ErrClosed) {
				log.Printf("serial link: reading the guest's port: %v", err)
			}
			return
		}
	}
}

// accept serves one client at a time: a new one replaces the previous one
// (the daemon reconnecting after a restart).
func (r *serialRelay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		if r.client != nil {
			r.client.Close()
		}
		r.client = c
		r.mu.Unlock()
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			_, _ = io.Copy(r.master, c)
			c.Close()
			r.mu.Lock()
			if r.client == c {
				r.client = nil
			}
			r.mu.Unlock()
		}()
	}
}

// close stops relaying and removes the socket and the port symlink.
func (r *serialRelay) close() {
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	if r.ln != nil {
		r.ln.Close()
		_ = os.Remove(r.ln.Addr().String())
	}
	r.mu.Lock()
	if r.client != nil {
		r.client.Close()
	}
	r.mu.Unlock()
	if r.master != nil {
		r.master.Close()
	}
	if r.slave != nil {
		r.slave.Close()
	}
	if r.link != "" {
		_ = os.Remove(r.link)
	}
	r.wg.Wait()
}
