package vsockdev

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/guestlink/guestlink/plugins/shared/vhostuser"
)

// Queue indexes of the vsock device.
const (
	QueueRx    = 0
	QueueTx    = 1
	QueueEvent = 2
)

// EventTransportReset is VIRTIO_VSOCK_EVENT_TRANSPORT_RESET.
const EventTransportReset = 0

// featureStream is VIRTIO_VSOCK_F_STREAM (bit 0). Linux drivers before
// SEQPACKET do not look at it; stream is implied.
const featureStream = 1 << 0

// DefaultBufAlloc is the receive buffer the device advertises per connection.
const DefaultBufAlloc = 256 << 10

// MaxConns bounds the connections of one device (both directions): a
// REQUEST beyond it is answered with RST, a host client beyond it is closed.
// Each holds at most BufAlloc bytes of the guest's data.
const MaxConns = 1024

// firstHostPort is the first local port given to host-initiated
// connections (as Firecracker does: far from the guest's usual ports).
const firstHostPort = 1 << 30

// Options configures a Device.
type Options struct {
	// CID is the guest's CID, given to it in the config space (3 and up).
	CID uint64
	// UDS is the host-side Unix socket path (see the package doc).
	UDS string
	// BufAlloc is the receive buffer advertised per connection; default DefaultBufAlloc.
	BufAlloc uint32
}

// Stats counts what the device carried.
type Stats struct {
	PacketsFromGuest, PacketsToGuest uint64
	BytesFromGuest, BytesToGuest     uint64 // RW payload bytes
	Connections                      uint64 // connections established, both directions
	Resets                           uint64 // RST packets sent to the guest
}

type connKey struct {
	host, guest uint32 // host-side port (dst of guest packets), guest-side port
}

// packet is one packet waiting for the rx queue. Header's BufAlloc and
// FwdCnt are filled when it is placed.
type packet struct {
	hdr  Header
	data []byte
	c    *conn // nil for a packet about no live connection (RST)
}

// Device is a virtio-vsock device. It implements vhostuser.Device; one
// Device serves one guest, over successive vhost-user sessions.
type Device struct {
	opts Options

	mu       sync.Mutex
	conns    map[connKey]*conn
	nextPort uint32
	rx       []*packet
	rxWake   chan struct{}
	events   int // TRANSPORT_RESET events to deliver
	evWake   chan struct{}

	packetsFrom, packetsTo, bytesFrom, bytesTo, established, resets atomic.Uint64
}

var _ vhostuser.Device = (*Device)(nil)

// New returns a device for the guest with CID opts.CID.
func New(opts Options) (*Device, error) {
	if opts.CID < 3 || opts.CID >= 0xffffffff {
		return nil, fmt.Errorf("vsock device: guest CID %d outside 3..2^32-2", opts.CID)
	}
	if opts.BufAlloc == 0 {
		opts.BufAlloc = DefaultBufAlloc
	}
	return &Device{opts: opts, conns: map[connKey]*conn{}, nextPort: firstHostPort,
		rxWake: make(chan struct{}, 1), evWake: make(chan struct{}, 1)}, nil
}

// Stats returns the device's counters.
func (d *Device) Stats() Stats {
	return Stats{PacketsFromGuest: d.packetsFrom.Load(), PacketsToGuest: d.packetsTo.Load(),
		BytesFromGuest: d.bytesFrom.Load(), BytesToGuest: d.bytesTo.Load(),
		Connections: d.established.Load(), Resets: d.resets.Load()}
}

// Features returns VERSION_1, indirect descriptors and stream sockets.
func (d *Device) Features() uint64 {
	return vhostuser.FeatureVersion1 | vhostuser.FeatureIndirectDesc | vhostuser.FeatureNotifyOnEmpty | featureStream
}

// NumQueues returns 3: rx, tx, event.
func (d *Device) NumQueues() int { return 3 }

// Config returns struct virtio_vsock_config: the guest's CID.
func (d *Device) Config() []byte {
	return binary.LittleEndian.AppendUint64(nil, d.opts.CID)
}

// Reset drops every connection (the front-end reset the device or went
// away; the guest's sockets are gone with it).
func (d *Device) Reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		d.dropLocked(c, false)
	}
	d.rx = nil
	// A pending TRANSPORT_RESET stays: it is news for whichever driver
	// runs the event queue next, and harmless to a fresh one.
}

// TransportReset drops every connection and tells the guest so with a
// TRANSPORT_RESET event (after a snapshot restore: the guest's connections
// are gone, its listeners stay).
func (d *Device) TransportReset() {
	d.mu.Lock()
	for _, c := range d.conns {
		d.dropLocked(c, false)
	}
	d.rx = nil
	d.events++
	d.mu.Unlock()
	wake(d.evWake)
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// RunQueue serves one queue until stop closes.
func (d *Device) RunQueue(q *vhostuser.Queue, stop <-chan struct{}) error {
	switch q.Index {
	case QueueRx:
		return d.run(q, stop, d.rxWake, d.fillRx)
	case QueueTx:
		return d.run(q, stop, nil, d.drainTx)
	case QueueEvent:
		return d.run(q, stop, d.evWake, d.fillEvents)
	}
	return fmt.Errorf("vsock device: no queue %d", q.Index)
}

// run calls step after every kick and every wake-up until stop closes.
func (d *Device) run(q *vhostuser.Queue, stop <-chan struct{}, wakeCh chan struct{}, step func(*vhostuser.Queue) error) error {
	for {
		if err := step(q); err != nil {
			return err
		}
		select {
		case <-stop:
			return nil
		case <-q.Kicks():
		case <-wakeCh: // nil for tx: never
		}
	}
}

// drainTx handles every packet the guest sent.
func (d *Device) drainTx(q *vhostuser.Queue) error {
	buf := make([]byte, HeaderLen+MaxPayload)
	handled := false
	defer func() {
		if handled {
			q.Notify()
		}
	}()
	for {
		c, ok, err := q.Pop()
		if err != nil || !ok {
			return err
		}
		n, err := q.Read(&c, 0, buf)
		if err != nil {
			return err
		}
		if err := q.Push(&c, 0); err != nil {
			return err
		}
		handled = true
		d.HandlePacket(buf[:n])
	}
}

// HandlePacket handles one packet from the guest: a header and its
// payload. A malformed packet is answered with RST when it names a
// connection, and dropped otherwise; it never stops the device.
func (d *Device) HandlePacket(b []byte) {
	d.packetsFrom.Add(1)
	h, err := ParseHeader(b)
	if err != nil {
		if len(b) >= HeaderLen {
			d.mu.Lock()
			if c := d.conns[connKey{h.DstPort, h.SrcPort}]; c != nil && h.SrcCID == d.opts.CID {
				d.dropLocked(c, true)
			}
			d.mu.Unlock()
		}
		return
	}
	if h.SrcCID != d.opts.CID || h.Op == OpRST {
		if h.Op == OpRST && h.SrcCID == d.opts.CID {
			d.mu.Lock()
			if c := d.conns[connKey{h.DstPort, h.SrcPort}]; c != nil {
				d.dropLocked(c, false)
			}
			d.mu.Unlock()
		}
		return // a spoofed source gets nothing back
	}
	if h.DstCID != HostCID || h.Type != TypeStream {
		d.mu.Lock()
		d.rstLocked(h)
		d.mu.Unlock()
		wake(d.rxWake)
		return
	}
	key := connKey{h.DstPort, h.SrcPort}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer wake(d.rxWake)
	c := d.conns[key]
	if c == nil {
		if h.Op == OpRequest && len(d.conns) < MaxConns {
			d.guestConnectLocked(h)
		} else {
			d.rstLocked(h)
		}
		return
	}
	c.peerBufAlloc, c.peerFwdCnt = h.BufAlloc, h.FwdCnt
	c.cond.Broadcast() // the credit may have grown
	switch h.Op {
	case OpResponse:
		if c.state != stateHostConnecting {
			d.dropLocked(c, true)
			return
		}
		c.state = stateEstablished
		d.established.Add(1)
		close(c.ready)
	case OpRW:
		if c.state != stateEstablished || c.guestShut&ShutdownSend != 0 {
			d.dropLocked(c, true)
			return
		}
		if uint64(len(c.inbuf))+uint64(h.Len) > uint64(d.opts.BufAlloc) {
			d.dropLocked(c, true) // the guest ignored our credit
			return
		}
		c.inbuf = append(c.inbuf, b[HeaderLen:HeaderLen+h.Len]...)
		d.bytesFrom.Add(uint64(h.Len))
	case OpCreditUpdate:
	case OpCreditRequest:
		d.queueLocked(c, OpCreditUpdate, 0, nil)
	case OpShutdown:
		if h.Flags&^(ShutdownRcv|ShutdownSend) != 0 {
			d.dropLocked(c, true)
			return
		}
		c.guestShut |= h.Flags
		if c.state != stateEstablished {
			d.dropLocked(c, true)
		}
	default: // a REQUEST on a live connection, an unknown op
		d.dropLocked(c, true)
	}
}

// rstLocked queues a RST answering h.
func (d *Device) rstLocked(h Header) {
	d.resets.Add(1)
	d.rx = append(d.rx, &packet{hdr: Header{SrcCID: HostCID, DstCID: h.SrcCID, SrcPort: h.DstPort, DstPort: h.SrcPort, Type: TypeStream, Op: OpRST}})
}

// queueLocked queues a packet on connection c.
func (d *Device) queueLocked(c *conn, op uint16, flags uint32, data []byte) {
	d.rx = append(d.rx, &packet{c: c, data: data, hdr: Header{
		SrcCID: HostCID, DstCID: d.opts.CID, SrcPort: c.key.host, DstPort: c.key.guest,
		Len: uint32(len(data)), Type: TypeStream, Op: op, Flags: flags}})
}

// fillRx places queued packets into the guest's receive buffers.
func (d *Device) fillRx(q *vhostuser.Queue) error {
	placed := false
	defer func() {
		if placed {
			q.Notify()
		}
	}()
	var hdr [HeaderLen]byte
	for {
		d.mu.Lock()
		if len(d.rx) == 0 {
			d.mu.Unlock()
			return nil
		}
		d.mu.Unlock()
		ch, ok, err := q.Pop()
		if err != nil || !ok {
			return err
		}
		room := ch.WritableLen() - HeaderLen
		if room < 0 {
			return fmt.Errorf("vsock device: receive buffer of %d bytes, smaller than a header", ch.WritableLen())
		}
		d.mu.Lock()
		if len(d.rx) == 0 { // dropped while we took the buffer
			d.mu.Unlock()
			q.Unpop()
			return nil
		}
		p := d.rx[0]
		data := p.data
		if len(data) > room {
			data = data[:room]
			p.data = p.data[room:]
		} else {
			d.rx = d.rx[1:]
		}
		h := p.hdr
		h.Len = uint32(len(data))
		h.BufAlloc = d.opts.BufAlloc
		if p.c != nil {
			h.FwdCnt = p.c.fwdCnt
			p.c.fwdSent = p.c.fwdCnt
		}
		d.mu.Unlock()
		h.Append(hdr[:0])
		if _, err := q.Write(&ch, 0, hdr[:]); err != nil {
			return err
		}
		if _, err := q.Write(&ch, HeaderLen, data); err != nil {
			return err
		}
		if err := q.Push(&ch, uint32(HeaderLen+len(data))); err != nil {
			return err
		}
		placed = true
		d.packetsTo.Add(1)
		d.bytesTo.Add(uint64(len(data)))
	}
}

// fillEvents delivers pending TRANSPORT_RESET events.
func (d *Device) fillEvents(q *vhostuser.Queue) error {
	for {
		d.mu.Lock()
		n := d.events
		d.mu.Unlock()
		if n == 0 {
			return nil
		}
		ch, ok, err := q.Pop()
		if err != nil || !ok {
			return err
		}
		var ev [4]byte
		binary.LittleEndian.PutUint32(ev[:], EventTransportReset)
		w, err := q.Write(&ch, 0, ev[:])
		if err != nil {
			return err
		}
		if err := q.Push(&ch, uint32(w)); err != nil {
			return err
		}
		d.mu.Lock()
		d.events--
		d.mu.Unlock()
		if err := q.Notify(); err != nil {
			return err
		}
	}
}

// Connection states.
const (
	stateGuestConnecting = iota // the guest sent REQUEST, the host socket is being dialled
	stateHostConnecting         // a host client sent CONNECT, REQUEST sent to the guest
	stateEstablished
)

// conn is one vsock connection. Its fields are guarded by Device.mu.
type conn struct {
	key   connKey
	state int
	host  net.Conn // nil until dialled
	cond  *sync.Cond
	ready chan struct{} // closed on RESPONSE (host-initiated)

	peerBufAlloc, peerFwdCnt uint32 // the guest's receive buffer, as it last said
	txCnt                    uint32 // payload bytes queued to the guest
	fwdCnt, fwdSent          uint32 // bytes written to the host socket; fwdCnt last told to the guest
	inbuf                    []byte // bytes from the guest not yet written to the host
	guestShut                uint32 // SHUTDOWN flags the guest sent
	hostEOF, writerDone      bool
	closed                   bool
}

// credit returns how many bytes the guest can take now.
func (c *conn) credit() uint32 {
	inFlight := c.txCnt - c.peerFwdCnt
	if inFlight >= c.peerBufAlloc {
		return 0
	}
	return c.peerBufAlloc - inFlight
}

// dropLocked ends connection c, with a RST to the guest when rst is set.
func (d *Device) dropLocked(c *conn, rst bool) {
	if c.closed {
		return
	}
	c.closed = true
	delete(d.conns, c.key)
	if c.host != nil {
		c.host.Close()
	}
	c.cond.Broadcast()
	if rst {
		d.resets.Add(1)
		d.queueLocked(c, OpRST, 0, nil)
		d.rx[len(d.rx)-1].c = nil
	}
	// Forget its queued data: the guest will not read it after a RST.
	kept := d.rx[:0]
	for _, p := range d.rx {
		if p.c != c {
			kept = append(kept, p)
		}
	}
	d.rx = kept
}

func (d *Device) newConnLocked(key connKey, state int) *conn {
	c := &conn{key: key, state: state, cond: sync.NewCond(&d.mu), ready: make(chan struct{})}
	d.conns[key] = c
	return c
}
