package vsockdev_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/guestlink/guestlink/link/hybrid"
	"github.com/guestlink/guestlink/plugins/shared/vhostuser"
	"github.com/guestlink/guestlink/plugins/shared/vhostuser/vhostusertest"
	"github.com/guestlink/guestlink/plugins/shared/vsockdev"
)

const guestCID = 42

// guest plays QEMU and the guest's virtio-vsock driver against a Device
// through a real vhost-user session.
type guest struct {
	t   testing.TB
	dev *vsockdev.Device
	f   *vhostusertest.Frontend
	uds string
}

// shortDir returns a temporary directory with a short path (socket paths
// are limited to 107 bytes).
func shortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "vsd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func newGuest(t testing.TB, bufAlloc uint32) *guest {
	t.Helper()
	uds := filepath.Join(shortDir(t), "v.sock")
	dev, err := vsockdev.New(vsockdev.Options{CID: guestCID, UDS: uds, BufAlloc: bufAlloc})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", uds)
	if err != nil {
		t.Fatal(err)
	}
	hostDone := make(chan struct{})
	go func() { dev.ServeHost(ln); close(hostDone) }()
	front, back := vhostusertest.NewSocketPair(t)
	ended := make(chan struct{})
	go func() { vhostuser.NewSession(back, dev).Serve(); close(ended) }()
	f := vhostusertest.New(t, front, dev.NumQueues())
	t.Cleanup(func() {
		ln.Close()
		<-hostDone
		f.Close()
		<-ended
	})
	cfg, err := f.Setup(vhostuser.FeatureVersion1|vhostuser.FeatureIndirectDesc|1, 8)
	if err != nil {
		t.Fatalf("vhost-user setup: %v", err)
	}
	if cid := binary.LittleEndian.Uint64(cfg); cid != guestCID {
		t.Fatalf("config space CID %d, want %d", cid, guestCID)
	}
	for range vhostusertest.QueueSize / 2 {
		f.Queues[vsockdev.QueueRx].OfferWritable(4096)
		f.Queues[vsockdev.QueueEvent].OfferWritable(4)
	}
	return &guest{t: t, dev: dev, f: f, uds: uds}
}

// send puts a packet on the tx queue as Linux does: header and payload in
// two descriptors (one when there is no payload).
func (g *guest) send(h vsockdev.Header, data []byte) {
	g.t.Helper()
	h.Len = uint32(len(data))
	if h.SrcCID == 0 {
		h.SrcCID = guestCID
	}
	if h.DstCID == 0 {
		h.DstCID = vsockdev.HostCID
	}
	if h.Type == 0 {
		h.Type = vsockdev.TypeStream
	}
	if h.BufAlloc == 0 {
		h.BufAlloc = 64 << 10
	}
	if len(data) == 0 {
		g.f.Queues[vsockdev.QueueTx].OfferReadable(h.Append(nil))
	} else {
		g.f.Queues[vsockdev.QueueTx].OfferReadable(h.Append(nil), data)
	}
}

// recv waits for the next packet the device put on the rx queue.
func (g *guest) recv() (vsockdev.Header, []byte) {
	g.t.Helper()
	q := g.f.Queues[vsockdev.QueueRx]
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, b, ok := q.TakeUsed(); ok {
			q.OfferWritable(4096)
			h, err := vsockdev.ParseHeader(b)
			if err != nil {
				g.t.Fatalf("device sent a bad packet: %v", err)
			}
			return h, b[vsockdev.HeaderLen:]
		}
		if time.Now().After(deadline) || !q.WaitCall(time.Until(deadline)) {
			g.t.Fatalf("no packet from the device within 10s (stats %+v)", g.dev.Stats())
		}
	}
}

// expect waits for a packet with op and checks its addressing.
func (g *guest) expect(op uint16, hostPort, guestPort uint32) (vsockdev.Header, []byte) {
	g.t.Helper()
	h, b := g.recv()
	if h.Op != op || h.SrcCID != vsockdev.HostCID || h.DstCID != guestCID || h.DstPort != guestPort || (hostPort != 0 && h.SrcPort != hostPort) {
		g.t.Fatalf("got %+v, want op %d from 2:%d to %d:%d", h, op, hostPort, guestCID, guestPort)
	}
	return h, b
}

// readGuest reads RW packets until n bytes arrived.
func (g *guest) readGuest(hostPort, guestPort uint32, n int) []byte {
	g.t.Helper()
	var got []byte
	for len(got) < n {
		_, b := g.expect(vsockdev.OpRW, hostPort, guestPort)
		got = append(got, b...)
	}
	return got
}

func TestGuestConnectsToHost(t *testing.T) {
	g := newGuest(t, 0)
	ln, err := net.Listen("unix", hybrid.HostPath(g.uds, 1234))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	g.send(vsockdev.Header{SrcPort: 5000, DstPort: 1234, Op: vsockdev.OpRequest}, nil)
	host, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	g.expect(vsockdev.OpResponse, 1234, 5000)

	g.send(vsockdev.Header{SrcPort: 5000, DstPort: 1234, Op: vsockdev.OpRW}, []byte("hello host"))
	buf := make([]byte, 10)
	if _, err := io.ReadFull(host, buf); err != nil || string(buf) != "hello host" {
		t.Fatalf("host read %q, %v", buf, err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1024) // 16 KiB: several 4 KiB rx buffers
	if _, err := host.Write(big); err != nil {
		t.Fatal(err)
	}
	if got := g.readGuest(1234, 5000, len(big)); !bytes.Equal(got, big) {
		t.Fatalf("guest read %d bytes, not what the host wrote", len(got))
	}
	host.Close()
	h, _ := g.expect(vsockdev.OpShutdown, 1234, 5000)
	if h.Flags != vsockdev.ShutdownSend {
		t.Fatalf("SHUTDOWN flags %d after the host closed, want SEND", h.Flags)
	}
	g.send(vsockdev.Header{SrcPort: 5000, DstPort: 1234, Op: vsockdev.OpShutdown, Flags: vsockdev.ShutdownRcv | vsockdev.ShutdownSend}, nil)
	g.expect(vsockdev.OpRST, 1234, 5000)
	if st := g.dev.Stats(); st.Connections != 1 || st.BytesFromGuest != 10 || st.BytesToGuest != uint64(len(big)) {
		t.Fatalf("stats %+v", st)
	}
}

func TestHostConnectsToGuest(t *testing.T) {
	g := newGuest(t, 0)
	c, err := net.Dial("unix", g.uds)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(hybrid.FormatConnect(8443))
	req, _ := g.recv()
	if req.Op != vsockdev.OpRequest || req.DstPort != 8443 || req.SrcPort < 1<<30 {
		t.Fatalf("REQUEST %+v, want to port 8443 from a port >= 2^30", req)
	}
	g.send(vsockdev.Header{SrcPort: 8443, DstPort: req.SrcPort, Op: vsockdev.OpResponse}, nil)
	line := make([]byte, 0, 32)
	for !bytes.HasSuffix(line, []byte("\n")) {
		var b [1]byte
		if _, err := c.Read(b[:]); err != nil {
			t.Fatalf("reading OK: %v (got %q)", err, line)
		}
		line = append(line, b[0])
	}
	if port, err := hybrid.ParseOK(line); err != nil || port != req.SrcPort {
		t.Fatalf("OK line %q: %d, %v; want port %d", line, port, err, req.SrcPort)
	}
	c.Write([]byte("ping"))
	if got := g.readGuest(req.SrcPort, 8443, 4); string(got) != "ping" {
		t.Fatalf("guest read %q", got)
	}
	g.send(vsockdev.Header{SrcPort: 8443, DstPort: req.SrcPort, Op: vsockdev.OpRW}, []byte("pong"))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("host read %q, %v", buf, err)
	}
	// The guest resets: the host sees EOF.
	g.send(vsockdev.Header{SrcPort: 8443, DstPort: req.SrcPort, Op: vsockdev.OpRST}, nil)
	if n, err := c.Read(buf); err == nil {
		t.Fatalf("host read %d bytes after the guest's RST", n)
	}
}

func TestHostConnectNotListening(t *testing.T) {
	g := newGuest(t, 0)
	tests := []struct {
		name  string
		guest func(req vsockdev.Header) // what the guest does with the REQUEST
	}{
		{"guest answers RST", func(req vsockdev.Header) {
			g.send(vsockdev.Header{SrcPort: req.DstPort, DstPort: req.SrcPort, Op: vsockdev.OpRST}, nil)
		}},
		{"guest answers RW instead of RESPONSE", func(req vsockdev.Header) {
			g.send(vsockdev.Header{SrcPort: req.DstPort, DstPort: req.SrcPort, Op: vsockdev.OpRW}, []byte("x"))
			g.expect(vsockdev.OpRST, req.SrcPort, req.DstPort)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := hybridDial(t, g, 77, tt.guest)
			if !errors.Is(err, hybrid.ErrNotListening) {
				t.Fatalf("hybrid.Dial = %v, want ErrNotListening", err)
			}
		})
	}
}

// hybridDial dials port through link/hybrid (the daemon's own dialer)
// while the guest answers with answer.
func hybridDial(t *testing.T, g *guest, port uint32, answer func(vsockdev.Header)) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	res := make(chan result, 1)
	go func() {
		c, err := hybrid.Dial(t.Context(), g.uds, port)
		res <- result{c, err}
	}()
	req, _ := g.recv()
	if req.Op != vsockdev.OpRequest || req.DstPort != port {
		t.Fatalf("got %+v, want a REQUEST to %d", req, port)
	}
	answer(req)
	r := <-res
	return r.c, r.err
}

func TestGuestConnectRefused(t *testing.T) {
	g := newGuest(t, 0)
	g.send(vsockdev.Header{SrcPort: 5001, DstPort: 999, Op: vsockdev.OpRequest}, nil)
	g.expect(vsockdev.OpRST, 999, 5001)
}

// TestCreditToGuest checks that the device never sends more than the
// guest's buf_alloc beyond its fwd_cnt, and sends more once the guest
// gives credit back.
func TestCreditToGuest(t *testing.T) {
	g := newGuest(t, 0)
	ln, err := net.Listen("unix", hybrid.HostPath(g.uds, 7))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const window = 100
	g.send(vsockdev.Header{SrcPort: 6000, DstPort: 7, Op: vsockdev.OpRequest, BufAlloc: window}, nil)
	host, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	g.expect(vsockdev.OpResponse, 7, 6000)
	data := bytes.Repeat([]byte{'z'}, 3*window)
	go host.Write(data)
	if got := g.readGuest(7, 6000, window); len(got) != window {
		t.Fatalf("guest got %d bytes, want its window of %d", len(got), window)
	}
	// The explicit signal: a CREDIT_REQUEST is answered after anything
	// already queued, so an RW here would mean the window was overrun.
	g.send(vsockdev.Header{SrcPort: 6000, DstPort: 7, Op: vsockdev.OpCreditRequest, BufAlloc: window}, nil)
	g.expect(vsockdev.OpCreditUpdate, 7, 6000)
	// Credit back (fwd_cnt = 100): exactly one more window.
	g.send(vsockdev.Header{SrcPort: 6000, DstPort: 7, Op: vsockdev.OpCreditUpdate, BufAlloc: window, FwdCnt: window}, nil)
	if got := g.readGuest(7, 6000, window); len(got) != window {
		t.Fatalf("guest got %d bytes after the credit update, want %d", len(got), window)
	}
	g.send(vsockdev.Header{SrcPort: 6000, DstPort: 7, Op: vsockdev.OpCreditRequest, BufAlloc: window, FwdCnt: window}, nil)
	g.expect(vsockdev.OpCreditUpdate, 7, 6000)
}

// TestCreditFromGuest checks the device's own window: a guest that
// ignores it is reset, and the device gives credit back as the host reads.
func TestCreditFromGuest(t *testing.T) {
	const window = 4096
	g := newGuest(t, window)
	ln, err := net.Listen("unix", hybrid.HostPath(g.uds, 8))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	g.send(vsockdev.Header{SrcPort: 6001, DstPort: 8, Op: vsockdev.OpRequest}, nil)
	host, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	h, _ := g.expect(vsockdev.OpResponse, 8, 6001)
	if h.BufAlloc != window {
		t.Fatalf("device advertises buf_alloc %d, want %d", h.BufAlloc, window)
	}
	// A full window, read by the host: the device gives it back.
	g.send(vsockdev.Header{SrcPort: 6001, DstPort: 8, Op: vsockdev.OpRW}, make([]byte, window))
	if _, err := io.ReadFull(host, make([]byte, window)); err != nil {
		t.Fatal(err)
	}
	h, _ = g.expect(vsockdev.OpCreditUpdate, 8, 6001)
	if h.FwdCnt != window {
		t.Fatalf("CREDIT_UPDATE fwd_cnt %d, want %d", h.FwdCnt, window)
	}
	// Over the window in one go (the host is not reading): RST, and the host sees EOF.
	g.send(vsockdev.Header{SrcPort: 6001, DstPort: 8, Op: vsockdev.OpRW}, make([]byte, window+1))
	g.expect(vsockdev.OpRST, 8, 6001)
	if n, err := host.Read(make([]byte, 1)); err == nil {
		t.Fatalf("host read %d bytes after the RST", n)
	}
}

// TestGarbagePackets sends malformed packets: each is answered with a RST
// or dropped, and the device keeps working (a REQUEST after it succeeds).
func TestGarbagePackets(t *testing.T) {
	g := newGuest(t, 0)
	ln, err := net.Listen("unix", hybrid.HostPath(g.uds, 9))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	hdr := func(h vsockdev.Header) []byte {
		h.SrcCID, h.DstCID, h.Type, h.BufAlloc = guestCID, vsockdev.HostCID, vsockdev.TypeStream, 4096
		return h.Append(nil)
	}
	tests := []struct {
		name    string
		pieces  [][]byte
		wantRST bool
	}{
		{"short header", [][]byte{make([]byte, 20)}, false},
		{"len beyond the buffers", [][]byte{hdr(vsockdev.Header{SrcPort: 1, DstPort: 9, Op: vsockdev.OpRW, Len: 100}), []byte("abc")}, false},
		{"len over 64 KiB", [][]byte{hdr(vsockdev.Header{SrcPort: 1, DstPort: 9, Op: vsockdev.OpRW, Len: 1 << 20})}, false},
		{"payload on a REQUEST", [][]byte{hdr(vsockdev.Header{SrcPort: 1, DstPort: 9, Op: vsockdev.OpRequest, Len: 1}), []byte("x")}, false},
		{"RW on no connection", [][]byte{hdr(vsockdev.Header{SrcPort: 2, DstPort: 9, Op: vsockdev.OpRW, Len: 1}), []byte("x")}, true},
		{"unknown op", [][]byte{hdr(vsockdev.Header{SrcPort: 3, DstPort: 9, Op: 99})}, true},
		{"seqpacket type", [][]byte{append(hdr(vsockdev.Header{SrcPort: 4, DstPort: 9, Op: vsockdev.OpRequest})[:28], 2, 0, 1, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0)}, true},
		{"to CID 7", [][]byte{func() []byte {
			b := hdr(vsockdev.Header{SrcPort: 5, DstPort: 9, Op: vsockdev.OpRequest})
			b[8] = 7
			return b
		}()}, true},
		{"spoofed source CID", [][]byte{func() []byte {
			b := hdr(vsockdev.Header{SrcPort: 6, DstPort: 9, Op: vsockdev.OpRequest})
			b[0] = 99
			return b
		}()}, false},
		{"RST on no connection", [][]byte{hdr(vsockdev.Header{SrcPort: 7, DstPort: 9, Op: vsockdev.OpRST})}, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g.f.Queues[vsockdev.QueueTx].OfferReadable(tt.pieces...)
			if tt.wantRST {
				h, _ := g.recv()
				if h.Op != vsockdev.OpRST {
					t.Fatalf("answer %+v, want RST", h)
				}
			}
			// The device still works, and said nothing else before this answer.
			port := uint32(20000 + i)
			g.send(vsockdev.Header{SrcPort: port, DstPort: 9, Op: vsockdev.OpRequest}, nil)
			g.expect(vsockdev.OpResponse, 9, port)
		})
	}
}

func TestTransportReset(t *testing.T) {
	g := newGuest(t, 0)
	ln, err := net.Listen("unix", hybrid.HostPath(g.uds, 10))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	g.send(vsockdev.Header{SrcPort: 6002, DstPort: 10, Op: vsockdev.OpRequest}, nil)
	host, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	g.expect(vsockdev.OpResponse, 10, 6002)
	g.dev.TransportReset()
	ev := g.f.Queues[vsockdev.QueueEvent]
	if !ev.WaitCall(10 * time.Second) {
		t.Fatal("no event within 10s")
	}
	_, b, ok := ev.TakeUsed()
	if !ok || len(b) != 4 || binary.LittleEndian.Uint32(b) != vsockdev.EventTransportReset {
		t.Fatalf("event %x (%v), want TRANSPORT_RESET", b, ok)
	}
	if n, err := host.Read(make([]byte, 1)); err == nil {
		t.Fatalf("host read %d bytes after the transport reset", n)
	}
}

func TestParseHeader(t *testing.T) {
	rw := vsockdev.Header{SrcCID: 3, DstCID: 2, SrcPort: 1, DstPort: 2, Len: 3, Type: 1, Op: vsockdev.OpRW, BufAlloc: 5, FwdCnt: 6}
	tests := []struct {
		name string
		in   []byte
		ok   bool
	}{
		{"RW with its payload", append(rw.Append(nil), "abc"...), true},
		{"RW with extra bytes", append(rw.Append(nil), "abcd"...), true},
		{"RW missing payload", append(rw.Append(nil), "ab"...), false},
		{"43 bytes", make([]byte, 43), false},
		{"zeros", make([]byte, 44), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := vsockdev.ParseHeader(tt.in)
			if (err == nil) != tt.ok {
				t.Fatalf("ParseHeader = %+v, %v; want ok=%v", h, err, tt.ok)
			}
			if err != nil && !errors.Is(err, vsockdev.ErrBadPacket) {
				t.Fatalf("error %v does not wrap ErrBadPacket", err)
			}
			if tt.ok && tt.name == "RW with its payload" && h != rw {
				t.Fatalf("round trip %+v, want %+v", h, rw)
			}
		})
	}
}

// FuzzHandlePacket feeds the device arbitrary packets from the guest, with
// a connection to a real host listener open: nothing panics, and whatever
// it answers is a well-formed packet to the guest.
func FuzzHandlePacket(f *testing.F) {
	for _, op := range []uint16{vsockdev.OpRequest, vsockdev.OpRW, vsockdev.OpShutdown, vsockdev.OpCreditRequest, vsockdev.OpRST, 42} {
		h := vsockdev.Header{SrcCID: guestCID, DstCID: 2, SrcPort: 1, DstPort: 1, Type: 1, Op: op, BufAlloc: 1 << 16}
		f.Add(h.Append(nil))
		f.Add(append(h.Append(nil)[:24], []byte(strconv.Itoa(int(op)))...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		dev, err := vsockdev.New(vsockdev.Options{CID: guestCID, UDS: "/nonexistent/v.sock"})
		if err != nil {
			t.Fatal(err)
		}
		dev.HandlePacket(b)
		dev.HandlePacket(b)
		dev.Reset()
	})
}

// TestConnectionLimit opens MaxConns connections from the guest: the next
// REQUEST is refused with RST, and one more is accepted once one closed.
func TestConnectionLimit(t *testing.T) {
	g := newGuest(t, 0)
	ln, err := net.Listen("unix", hybrid.HostPath(g.uds, 12))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var hosts []net.Conn
	defer func() {
		for _, c := range hosts {
			c.Close()
		}
	}()
	for i := range vsockdev.MaxConns {
		g.send(vsockdev.Header{SrcPort: uint32(10000 + i), DstPort: 12, Op: vsockdev.OpRequest}, nil)
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, c)
		g.expect(vsockdev.OpResponse, 12, uint32(10000+i))
	}
	g.send(vsockdev.Header{SrcPort: 9999, DstPort: 12, Op: vsockdev.OpRequest}, nil)
	g.expect(vsockdev.OpRST, 12, 9999)
	g.send(vsockdev.Header{SrcPort: 10000, DstPort: 12, Op: vsockdev.OpRST}, nil)
	g.send(vsockdev.Header{SrcPort: 9999, DstPort: 12, Op: vsockdev.OpRequest}, nil)
	g.expect(vsockdev.OpResponse, 12, 9999)
}
