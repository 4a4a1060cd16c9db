package serialmux

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"regexp"
	"time"
)

// Before each session both ends agree on a fresh start, because a
// virtio-serial port outlives its host connections: when the daemon
// reconnects, bytes of the previous session may still be in flight and the
// guest may not yet have noticed the old session ended. The host repeats
// "\nGLMX-SYNC <nonce>\n" until the guest answers "\nGLMX-ACK <nonce>\n",
// then sends "\nGLMX-GO <nonce>\n" and starts yamux; the guest starts yamux
// after the GO. Both ends skip any other bytes while they wait, so stale
// frames of an old session never reach a new one. A SYNC arriving inside a
// running guest session breaks it (it is not a yamux frame), and the guest
// then waits for the next SYNC.

// syncInterval is how often the host repeats its SYNC.
const syncInterval = 250 * time.Millisecond

var syncLine = regexp.MustCompile(`^GLMX-(SYNC|ACK|GO) ([0-9a-f]{16})$`)

func syncMsg(word, nonce string) []byte { return []byte("\nGLMX-" + word + " " + nonce + "\n") }

func newNonce() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// scanSync reads until a sync line and returns its word and nonce; other
// bytes are skipped.
func scanSync(r *bufio.Reader) (word, nonce string, err error) {
	var line []byte
	overflow := false
	for {
		b, err := r.ReadByte()
		if err != nil {
			return "", "", err
		}
		if b != '\n' {
			if len(line) < 40 {
				line = append(line, b)
			} else {
				overflow = true
			}
			continue
		}
		if !overflow {
			if m := syncLine.FindSubmatch(line); m != nil {
				return string(m[1]), string(m[2]), nil
			}
		}
		line, overflow = line[:0], false
	}
}

// readWriteCloser joins a buffered reader to its connection.
type readWriteCloser struct {
	io.Reader
	io.WriteCloser
}

// hostSync runs the host side of the handshake on conn and returns the
// stream yamux must use.
func hostSync(ctx context.Context, conn io.ReadWriteCloser) (io.ReadWriteCloser, error) {
	nonce := newNonce()
	br := bufio.NewReader(conn)
	stop := make(chan struct{})
	sent := make(chan error, 1)
	go func() {
		t := time.NewTicker(syncInterval)
		defer t.Stop()
		for {
			if _, err := conn.Write(syncMsg("SYNC", nonce)); err != nil {
				sent <- err
				return
			}
			select {
			case <-stop:
				sent <- nil
				return
			case <-t.C:
			}
		}
	}()
	got := make(chan error, 1)
	go func() {
		for {
			word, n, err := scanSync(br)
			if err != nil {
				got <- err
				return
			}
			if word == "ACK" && n == nonce {
				got <- nil
				return
			}
		}
	}()
	var err error
	select {
	case err = <-got:
	case <-ctx.Done():
		err = ctx.Err()
	}
	close(stop)
	if werr := <-sent; err == nil && werr != nil {
		err = werr
	}
	if err != nil {
		conn.Close() // also ends the scanning goroutine
		return nil, fmt.Errorf("serial link handshake: %w", err)
	}
	if _, err := conn.Write(syncMsg("GO", nonce)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("serial link handshake: %w", err)
	}
	return readWriteCloser{br, conn}, nil
}

// guestSync runs the guest side of the handshake on rwc and returns the
// stream yamux must use.
func guestSync(rwc io.ReadWriteCloser) (io.ReadWriteCloser, error) {
	br := bufio.NewReader(rwc)
	acked := ""
	for {
		word, n, err := scanSync(br)
		if err != nil {
			return nil, fmt.Errorf("serial link handshake: %w", err)
		}
		switch {
		case word == "SYNC" && n != acked:
			if _, err := rwc.Write(syncMsg("ACK", n)); err != nil {
				return nil, fmt.Errorf("serial link handshake: %w", err)
			}
			acked = n
		case word == "GO" && n == acked:
			return readWriteCloser{br, rwc}, nil
		}
	}
}
