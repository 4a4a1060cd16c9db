package vsockdev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/guestlink/guestlink/link/hybrid"
)

// guestConnectLocked answers a guest's REQUEST: it dials "<uds>_<port>"
// in the background and answers RESPONSE, or RST when nothing listens.
func (d *Device) guestConnectLocked(h Header) {
	c := d.newConnLocked(connKey{h.DstPort, h.SrcPort}, stateGuestConnecting)
	c.peerBufAlloc, c.peerFwdCnt = h.BufAlloc, h.FwdCnt
	path := hybrid.HostPath(d.opts.UDS, h.DstPort)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), hybrid.HandshakeTimeout)
		defer cancel()
		var dialer net.Dialer
		hc, err := dialer.DialContext(ctx, "unix", path)
		d.mu.Lock()
		defer wake(d.rxWake)
		defer d.mu.Unlock()
		if err != nil || c.closed {
			if hc != nil {
				hc.Close()
			}
			d.dropLocked(c, true)
			return
		}
		c.host = hc
		c.state = stateEstablished
		d.established.Add(1)
		d.queueLocked(c, OpResponse, 0, nil)
		d.startPumpsLocked(c)
	}()
}

// startPumpsLocked starts the goroutines that move c's bytes both ways.
func (d *Device) startPumpsLocked(c *conn) {
	go d.hostToGuest(c)
	go d.guestToHost(c)
}

// hostToGuest reads the host socket as far as the guest's credit allows
// and queues RW packets; EOF becomes a SHUTDOWN(SEND).
func (d *Device) hostToGuest(c *conn) {
	for {
		d.mu.Lock()
		for !c.closed && c.guestShut&ShutdownRcv == 0 && c.credit() == 0 {
			c.cond.Wait()
		}
		if c.closed || c.guestShut&ShutdownRcv != 0 {
			c.hostEOF = true
			d.finishLocked(c)
			d.mu.Unlock()
			return
		}
		n := min(c.credit(), MaxPayload)
		d.mu.Unlock()
		buf := make([]byte, n)
		k, err := c.host.Read(buf)
		d.mu.Lock()
		if c.closed {
			d.mu.Unlock()
			return
		}
		if k > 0 {
			c.txCnt += uint32(k)
			d.queueLocked(c, OpRW, 0, buf[:k])
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				c.hostEOF = true
				d.queueLocked(c, OpShutdown, ShutdownSend, nil)
				d.finishLocked(c)
			} else {
				d.dropLocked(c, true)
			}
			d.mu.Unlock()
			wake(d.rxWake)
			return
		}
		d.mu.Unlock()
		wake(d.rxWake)
	}
}

// guestToHost writes what the guest sent to the host socket and gives the
// guest its credit back.
func (d *Device) guestToHost(c *conn) {
	for {
		d.mu.Lock()
		for !c.closed && len(c.inbuf) == 0 && c.guestShut&ShutdownSend == 0 {
			c.cond.Wait()
		}
		if c.closed {
			d.mu.Unlock()
			return
		}
		if len(c.inbuf) == 0 { // the guest shut its sending side and all is written
			c.writerDone = true
			if cw, ok := c.host.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite()
			}
			d.finishLocked(c)
			d.mu.Unlock()
			wake(d.rxWake)
			return
		}
		data := c.inbuf
		c.inbuf = nil
		d.mu.Unlock()
		_, err := c.host.Write(data)
		d.mu.Lock()
		if err != nil {
			d.dropLocked(c, true)
			d.mu.Unlock()
			wake(d.rxWake)
			return
		}
		c.fwdCnt += uint32(len(data))
		// Tell the guest once a quarter of its window came free (every
		// packet to the guest carries fwd_cnt too); it cannot stall: a
		// guest out of credit has a whole window unacknowledged.
		if c.fwdCnt-c.fwdSent >= d.opts.BufAlloc/4 {
			d.queueLocked(c, OpCreditUpdate, 0, nil)
		}
		d.mu.Unlock()
		wake(d.rxWake)
	}
}

// finishLocked ends c with a RST once both directions are done: the
// guest's data written out after its SHUTDOWN(SEND), and the host's side
// read to EOF or refused by the guest's SHUTDOWN(RCV).
func (d *Device) finishLocked(c *conn) {
	if c.writerDone && c.hostEOF {
		d.dropLocked(c, true)
	}
}

// ServeHost accepts host clients on ln (the "<uds>" socket) until ln is
// closed: each writes "CONNECT <port>\n", reads "OK <hostport>\n" once the
// guest accepted, and then owns the stream; EOF without OK means nothing
// listens on that port in the guest.
func (d *Device) ServeHost(ln net.Listener) error {
	for {
		hc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("accepting on the vsock host socket: %w", err)
		}
		go d.hostConnect(hc)
	}
}

// hostConnect runs one host client's handshake.
func (d *Device) hostConnect(hc net.Conn) {
	hc.SetDeadline(time.Now().Add(hybrid.HandshakeTimeout))
	line, err := readLine(hc)
	if err != nil {
		hc.Close()
		return
	}
	port, err := hybrid.ParseConnect(line)
	if err != nil {
		hc.Close()
		return
	}
	d.mu.Lock()
	if len(d.conns) >= MaxConns {
		d.mu.Unlock()
		hc.Close()
		return
	}
	key := connKey{d.nextPort, port}
	for d.conns[key] != nil {
		d.nextPort++
		key.host = d.nextPort
	}
	d.nextPort++
	if d.nextPort < firstHostPort {
		d.nextPort = firstHostPort
	}
	c := d.newConnLocked(key, stateHostConnecting)
	c.host = hc
	d.queueLocked(c, OpRequest, 0, nil)
	d.mu.Unlock()
	wake(d.rxWake)

	timer := time.NewTimer(hybrid.HandshakeTimeout)
	defer timer.Stop()
	closed := make(chan struct{})
	go func() { // c.closed has no channel; poll it through the cond
		d.mu.Lock()
		for !c.closed && c.state != stateEstablished {
			c.cond.Wait()
		}
		d.mu.Unlock()
		close(closed)
	}()
	select {
	case <-c.ready:
	case <-closed:
	case <-timer.C:
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if c.closed || c.state != stateEstablished {
		d.dropLocked(c, !c.closed)
		c.cond.Broadcast()
		wake(d.rxWake)
		return
	}
	hc.SetDeadline(time.Time{})
	if _, err := hc.Write(hybrid.FormatOK(key.host)); err != nil {
		d.dropLocked(c, true)
		wake(d.rxWake)
		return
	}
	d.startPumpsLocked(c)
}

// readLine reads one handshake line byte by byte (nothing past the newline
// is consumed: it belongs to the stream).
func readLine(r io.Reader) ([]byte, error) {
	var line []byte
	var b [1]byte
	for len(line) < hybrid.MaxLine {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return nil, err
		}
		line = append(line, b[0])
		if b[0] == '\n' {
			return line, nil
		}
	}
	return nil, fmt.Errorf("%w: no newline in %d bytes", hybrid.ErrBadHandshake, hybrid.MaxLine)
}
