// Package vhostusertest plays QEMU and the guest driver against a
// vhost-user back-end in tests: it owns a memfd as guest memory, sends the
// real protocol messages with real file descriptors (the memfd, eventfds)
// over a Unix socket, and drives split virtqueues in that memory the way a
// virtio driver does.
package vhostusertest

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Layout of the guest memory.
const (
	MemSize   = 4 << 20
	QueueSize = 64
	BufSize   = 8192
	// UserBase is added to guest-physical addresses to make the front-end's
	// virtual addresses (SET_VRING_ADDR), so a back-end that mixes the two fails.
	UserBase   = 0x7f0000000000
	bufferBase = 64 << 10
)

// Wire constants (duplicated from the protocol document on purpose: the test
// front-end does not trust the package it tests).
const (
	reqGetFeatures             = 1
	reqSetFeatures             = 2
	reqSetOwner                = 3
	reqSetMemTable             = 5
	reqSetVringNum             = 8
	reqSetVringAddr            = 9
	reqSetVringBase            = 10
	reqGetVringBase            = 11
	reqSetVringKick            = 12
	reqSetVringCall            = 13
	reqGetProtoFeatures        = 15
	reqSetProtoFeatures        = 16
	reqSetVringEnable          = 18
	reqGetConfig               = 24
	featProtocol               = 1 << 30
	protoReplyAck              = 1 << 3
	protoConfig                = 1 << 9
	flagNeedReply              = 1 << 3
	descNext, descWrite        = 1, 2
	descIndirect        uint16 = 4
)

// Frontend is the QEMU side of one vhost-user connection.
type Frontend struct {
	t      testing.TB
	Conn   *net.UnixConn
	Mem    []byte
	memfd  int
	Queues []*DriverQueue
}

// DriverQueue is the guest driver's view of one split virtqueue.
type DriverQueue struct {
	f                  *Frontend
	Index              int
	Desc, Avail, Used  uint64 // guest-physical addresses
	Kick, Call         int    // eventfds
	availIdx, lastUsed uint16
}

// New returns a front-end with nq queues talking on conn; Close (registered
// with t.Cleanup) releases everything.
func New(t testing.TB, conn *net.UnixConn, nq int) *Frontend {
	t.Helper()
	fd, err := unix.MemfdCreate("vhostusertest", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatalf("memfd_create: %v", err)
	}
	if err := unix.Ftruncate(fd, MemSize); err != nil {
		t.Fatalf("ftruncate: %v", err)
	}
	mem, err := unix.Mmap(fd, 0, MemSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	f := &Frontend{t: t, Conn: conn, Mem: mem, memfd: fd}
	for i := range nq {
		base := uint64(4096 * (i + 1))
		kick, err1 := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		call, err2 := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err1 != nil || err2 != nil {
			t.Fatalf("eventfd: %v %v", err1, err2)
		}
		f.Queues = append(f.Queues, &DriverQueue{f: f, Index: i, Desc: base, Avail: base + 1024, Used: base + 2048, Kick: kick, Call: call})
	}
	t.Cleanup(f.Close)
	return f
}

// Close closes the connection and frees the memory and eventfds.
func (f *Frontend) Close() {
	f.Conn.Close()
	if f.Mem != nil {
		unix.Munmap(f.Mem)
		f.Mem = nil
		unix.Close(f.memfd)
		for _, q := range f.Queues {
			unix.Close(q.Kick)
			unix.Close(q.Call)
		}
	}
}

// Send sends one message with fds; with needReply it waits for the ack
// and returns an error if the back-end hung up or refused.
func (f *Frontend) Send(req uint32, payload []byte, fds []int, needReply bool) error {
	b := binary.LittleEndian.AppendUint32(nil, req)
	flags := uint32(1)
	if needReply {
		flags |= flagNeedReply
	}
	b = binary.LittleEndian.AppendUint32(b, flags)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
	b = append(b, payload...)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := f.Conn.WriteMsgUnix(b, oob, nil); err != nil {
		return fmt.Errorf("sending request %d: %w", req, err)
	}
	if needReply {
		p, err := f.readReply(req)
		if err != nil {
			return err
		}
		if len(p) != 8 || binary.LittleEndian.Uint64(p) != 0 {
			return fmt.Errorf("request %d: ack %x", req, p)
		}
	}
	return nil
}

// Call sends a request that has a reply and returns the reply's payload.
func (f *Frontend) Call(req uint32, payload []byte) ([]byte, error) {
	if err := f.Send(req, payload, nil, false); err != nil {
		return nil, err
	}
	return f.readReply(req)
}

func (f *Frontend) readReply(req uint32) ([]byte, error) {
	f.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer f.Conn.SetReadDeadline(time.Time{})
	var h [12]byte
	if _, err := ioReadFull(f.Conn, h[:]); err != nil {
		return nil, fmt.Errorf("reply to request %d: %w", req, err)
	}
	if got := binary.LittleEndian.Uint32(h[:]); got != req || binary.LittleEndian.Uint32(h[4:])&7 != 5 {
		return nil, fmt.Errorf("reply to request %d: header %x", req, h)
	}
	p := make([]byte, binary.LittleEndian.Uint32(h[8:]))
	if _, err := ioReadFull(f.Conn, p); err != nil {
		return nil, fmt.Errorf("reply payload of request %d: %w", req, err)
	}
	return p, nil
}

func ioReadFull(c *net.UnixConn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func state(i, n uint32) []byte {
	return binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, i), n)
}

// Setup runs the handshake QEMU runs for a vhost-user device with nq
// queues, acknowledging features&offered, and returns the config space
// (configSize bytes).
func (f *Frontend) Setup(features uint64, configSize uint32) ([]byte, error) {
	if err := f.Send(reqSetOwner, nil, nil, false); err != nil {
		return nil, err
	}
	p, err := f.Call(reqGetFeatures, nil)
	if err != nil {
		return nil, err
	}
	offered := binary.LittleEndian.Uint64(p)
	if offered&featProtocol == 0 {
		return nil, fmt.Errorf("back-end offers %#x without PROTOCOL_FEATURES", offered)
	}
	if p, err = f.Call(reqGetProtoFeatures, nil); err != nil {
		return nil, err
	}
	proto := binary.LittleEndian.Uint64(p) & (protoReplyAck | protoConfig)
	if proto != protoReplyAck|protoConfig {
		return nil, fmt.Errorf("back-end protocol features %#x lack REPLY_ACK or CONFIG", binary.LittleEndian.Uint64(p))
	}
	if err := f.Send(reqSetProtoFeatures, u64(proto), nil, false); err != nil {
		return nil, err
	}
	if err := f.Send(reqSetFeatures, u64((features&offered)|featProtocol), nil, true); err != nil {
		return nil, err
	}
	cfg := binary.LittleEndian.AppendUint32(nil, 0)
	cfg = binary.LittleEndian.AppendUint32(cfg, configSize)
	cfg = binary.LittleEndian.AppendUint32(cfg, 0)
	cfg = append(cfg, make([]byte, configSize)...)
	if p, err = f.Call(reqGetConfig, cfg); err != nil {
		return nil, err
	}
	if len(p) != 12+int(configSize) {
		return nil, fmt.Errorf("GET_CONFIG reply of %d bytes", len(p))
	}
	config := p[12:]
	region := binary.LittleEndian.AppendUint32(nil, 1)
	region = binary.LittleEndian.AppendUint32(region, 0)
	region = binary.LittleEndian.AppendUint64(region, 0)        // guest-physical
	region = binary.LittleEndian.AppendUint64(region, MemSize)  // size
	region = binary.LittleEndian.AppendUint64(region, UserBase) // front-end address
	region = binary.LittleEndian.AppendUint64(region, 0)        // mmap offset
	if err := f.Send(reqSetMemTable, region, []int{f.memfd}, true); err != nil {
		return nil, err
	}
	for _, q := range f.Queues {
		i := uint32(q.Index)
		if err := f.Send(reqSetVringNum, state(i, QueueSize), nil, true); err != nil {
			return nil, err
		}
		if err := f.Send(reqSetVringBase, state(i, 0), nil, true); err != nil {
			return nil, err
		}
		a := state(i, 0)
		a = binary.LittleEndian.AppendUint64(a, UserBase+q.Desc)
		a = binary.LittleEndian.AppendUint64(a, UserBase+q.Used)
		a = binary.LittleEndian.AppendUint64(a, UserBase+q.Avail)
		a = binary.LittleEndian.AppendUint64(a, 0)
		if err := f.Send(reqSetVringAddr, a, nil, true); err != nil {
			return nil, err
		}
		if err := f.Send(reqSetVringKick, u64(uint64(i)), []int{q.Kick}, true); err != nil {
			return nil, err
		}
		if err := f.Send(reqSetVringCall, u64(uint64(i)), []int{q.Call}, true); err != nil {
			return nil, err
		}
		if err := f.Send(reqSetVringEnable, state(i, 1), nil, true); err != nil {
			return nil, err
		}
	}
	return config, nil
}

// GetVringBase stops queue i and returns the back-end's next available index.
func (f *Frontend) GetVringBase(i uint32) (uint32, error) {
	p, err := f.Call(reqGetVringBase, state(i, 0))
	if err != nil {
		return 0, err
	}
	if len(p) != 8 {
		return 0, fmt.Errorf("GET_VRING_BASE reply of %d bytes", len(p))
	}
	return binary.LittleEndian.Uint32(p[4:]), nil
}

// buffer returns the fixed buffer of descriptor slot d of queue q.
func (q *DriverQueue) buffer(slot uint16) uint64 {
	return bufferBase + uint64(q.Index*QueueSize+int(slot))*BufSize
}

func (q *DriverQueue) putDesc(table uint64, i uint16, addr uint64, n uint32, flags, next uint16) {
	d := q.f.Mem[table+16*uint64(i):]
	binary.LittleEndian.PutUint64(d, addr)
	binary.LittleEndian.PutUint32(d[8:], n)
	binary.LittleEndian.PutUint16(d[12:], flags)
	binary.LittleEndian.PutUint16(d[14:], next)
}

// publish puts head into the available ring and kicks.
func (q *DriverQueue) publish(head uint16) {
	m := q.f.Mem
	binary.LittleEndian.PutUint16(m[q.Avail+4+2*uint64(q.availIdx%QueueSize):], head)
	q.availIdx++
	binary.LittleEndian.PutUint16(m[q.Avail+2:], q.availIdx)
	unix.Write(q.Kick, u64(1))
}

// slot is the descriptor slot for the next buffer (buffers complete in order).
func (q *DriverQueue) slot() uint16 { return q.availIdx % QueueSize }

// OfferReadable makes data available to the device as a chain of the given
// pieces (each a descriptor), for a tx queue. The pieces take the
// descriptors of the next slots too: a driver that keeps several chains in
// flight sends one piece each.
func (q *DriverQueue) OfferReadable(pieces ...[]byte) {
	head := q.slot()
	base := q.buffer(head)
	off := uint64(0)
	// Chain descriptors live in the slot's buffer tail (an indirect-like private table).
	for k, p := range pieces {
		copy(q.f.Mem[base+off:], p)
		i := (head + uint16(k)) % QueueSize
		flags, next := uint16(0), uint16(0)
		if k < len(pieces)-1 {
			flags, next = descNext, (i+1)%QueueSize
		}
		q.putDesc(q.Desc, i, base+off, uint32(len(p)), flags, next)
		off += uint64(len(p))
	}
	q.publish(head)
}

// OfferIndirect makes data available through one indirect descriptor
// pointing at a table of the given pieces.
func (q *DriverQueue) OfferIndirect(pieces ...[]byte) {
	head := q.slot()
	base := q.buffer(head)
	table := base + BufSize - 16*uint64(len(pieces))
	off := uint64(0)
	for k, p := range pieces {
		copy(q.f.Mem[base+off:], p)
		flags := uint16(0)
		if k < len(pieces)-1 {
			flags = descNext
		}
		q.putDesc(table, uint16(k), base+off, uint32(len(p)), flags, uint16(k+1))
		off += uint64(len(p))
	}
	q.putDesc(q.Desc, head, table, uint32(16*len(pieces)), descIndirect, 0)
	q.publish(head)
}

// OfferWritable gives the device one writable buffer of n bytes (n <= BufSize).
func (q *DriverQueue) OfferWritable(n uint32) {
	head := q.slot()
	q.putDesc(q.Desc, head, q.buffer(head), n, descWrite, 0)
	q.publish(head)
}

// PutRaw writes a raw descriptor (for tests of malformed chains) and
// publishes it as head.
func (q *DriverQueue) PutRaw(i uint16, addr uint64, n uint32, flags, next uint16, publish bool) {
	q.putDesc(q.Desc, i, addr, n, flags, next)
	if publish {
		q.publish(i)
	}
}

// TakeUsed returns the next used element and the bytes the device wrote into
// its buffer; ok is false when the device has not returned one.
func (q *DriverQueue) TakeUsed() (id uint16, data []byte, ok bool) {
	m := q.f.Mem
	if binary.LittleEndian.Uint16(m[q.Used+2:]) == q.lastUsed {
		return 0, nil, false
	}
	e := m[q.Used+4+8*uint64(q.lastUsed%QueueSize):]
	id = uint16(binary.LittleEndian.Uint32(e))
	n := binary.LittleEndian.Uint32(e[4:])
	q.lastUsed++
	if n > BufSize {
		n = BufSize
	}
	b := q.buffer(id)
	return id, append([]byte(nil), m[b:b+uint64(n)]...), true
}

// WaitCall waits until the device signals the queue (its call eventfd) or
// the timeout ends, and reports whether it did.
func (q *DriverQueue) WaitCall(timeout time.Duration) bool {
	fds := []unix.PollFd{{Fd: int32(q.Call), Events: unix.POLLIN}}
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return false
		}
		var b [8]byte
		unix.Read(q.Call, b[:])
		return true
	}
}

// NewSocketPair returns the two ends of a Unix stream socket pair.
func NewSocketPair(t testing.TB) (front, back *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conv := func(fd int, name string) *net.UnixConn {
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	return conv(fds[0], "front"), conv(fds[1], "back")
}
