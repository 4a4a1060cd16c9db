package simvm

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The serial relay carries bytes both ways between the guest's port (the
// pseudo-terminal behind the symlink) and the client of serial.sock,
// unchanged (raw mode: no echo, no CR/LF translation), and cleans up.
func TestSerialRelay(t *testing.T) {
	dir, err := os.MkdirTemp("", "gls")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	p := Paths{Dir: dir}
	if err := os.MkdirAll(filepath.Dir(p.Port(SerialPort)), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := startSerial(p)
	if err != nil {
		t.Fatal(err)
	}
	port, err := os.OpenFile(p.Port(SerialPort), os.O_RDWR, 0)
	if err != nil {
		r.close()
		t.Fatal(err)
	}
	c, err := net.Dial("unix", p.SerialLink())
	if err != nil {
		port.Close()
		r.close()
		t.Fatal(err)
	}
	// The relay takes the client on its accept goroutine: what the guest
	// writes before that is dropped, so wait until a byte makes it through.
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	probe := make([]byte, 1)
	for {
		if _, err := port.Write([]byte{0x7f}); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if n, _ := c.Read(probe); n == 1 {
			break
		}
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	// Guest -> host: every byte value, CR and LF included.
	if _, err := port.Write(all); err != nil {
		t.Fatal(err)
	}
	// Probe bytes written before the relay took the client may still
	// precede them.
	var got []byte
	for !bytes.HasSuffix(got, all) {
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("reading from serial.sock: %v (got % x)", err, got)
		}
		got = append(got, buf[:n]...)
	}
	if bytes.Count(got[:len(got)-len(all)], []byte{0x7f}) != len(got)-len(all) {
		t.Fatalf("guest -> host bytes changed:\n got % x\nwant % x", got, all)
	}
	// Host -> guest.
	if _, err := c.Write(all); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, len(all))
	_ = port.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(port, back); err != nil {
		t.Fatalf("reading the guest's port: %v", err)
	}
	if !bytes.Equal(back, all) {
		t.Fatalf("host -> guest bytes changed:\n got % x\nwant % x", back, all)
	}
	c.Close()
	port.Close()
	r.close()
	for _, f := range []string{p.SerialLink(), p.Port(SerialPort)} {
		if _, err := os.Lstat(f); !os.IsNotExist(err) {
			t.Errorf("%s left behind (%v)", f, err)
		}
	}
}
