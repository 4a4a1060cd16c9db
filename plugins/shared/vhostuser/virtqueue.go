package vhostuser

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Descriptor flags (virtio 1.x, 2.7.5).
const (
	descNext     = 1
	descWrite    = 2
	descIndirect = 4
)

// availNoInterrupt is VIRTQ_AVAIL_F_NO_INTERRUPT.
const availNoInterrupt = 1

// MaxQueueSize is the largest split ring (virtio 1.x: 32768).
const MaxQueueSize = 32768

// maxChainBytes bounds the bytes one chain may describe.
const maxChainBytes = 1 << 28

// Queue is one split virtqueue of a running device. Its methods are safe
// for the queue's handler goroutine while the session changes the memory
// table; only one goroutine may Pop and Push on a queue.
type Queue struct {
	// Index is the queue's number (vsock: 0 rx, 1 tx, 2 event).
	Index int

	mu  *sync.RWMutex // the session's memory lock
	mem **Memory

	size      uint16
	addr      VringAddr
	addrSet   bool
	indirect  bool
	lastAvail uint16
	usedIdx   uint16
	desc      []byte
	avail     []byte
	used      []byte

	kick    *os.File
	call    *os.File
	callMu  sync.Mutex
	kicks   chan struct{}
	enabled bool
	running bool
	stop    chan struct{}
	done    chan struct{}
}

// NewQueue returns a queue of size entries over memory mem whose rings sit
// at the guest-physical addresses desc, avail and used (what a driver
// writes to the device), for tests and fuzz targets that play both sides.
func NewQueue(mem *Memory, size uint16, desc, avail, used uint64, indirect bool) (*Queue, error) {
	q := &Queue{mu: new(sync.RWMutex), mem: &mem, size: size, indirect: indirect, kicks: make(chan struct{}, 1)}
	if size == 0 || size > MaxQueueSize || size&(size-1) != 0 {
		return nil, fmt.Errorf("%w: queue size %d", ErrProtocol, size)
	}
	var err error
	if q.desc, err = mem.Slice(desc, 16*uint64(size)); err != nil {
		return nil, fmt.Errorf("descriptor table: %w", err)
	}
	if q.avail, err = mem.Slice(avail, 6+2*uint64(size)); err != nil {
		return nil, fmt.Errorf("available ring: %w", err)
	}
	if q.used, err = mem.Slice(used, 6+8*uint64(size)); err != nil {
		return nil, fmt.Errorf("used ring: %w", err)
	}
	return q, nil
}

// resolve translates the ring addresses through the current memory table
// (the session holds mu for writing).
func (q *Queue) resolve() error {
	m := *q.mem
	if m == nil {
		return fmt.Errorf("%w: queue %d: ring addresses before SET_MEM_TABLE", ErrProtocol, q.Index)
	}
	var err error
	n := uint64(q.size)
	if q.desc, err = m.sliceUser(q.addr.Desc, 16*n); err != nil {
		return fmt.Errorf("queue %d descriptor table: %w", q.Index, err)
	}
	if q.avail, err = m.sliceUser(q.addr.Avail, 6+2*n); err != nil {
		return fmt.Errorf("queue %d available ring: %w", q.Index, err)
	}
	if q.used, err = m.sliceUser(q.addr.Used, 6+8*n); err != nil {
		return fmt.Errorf("queue %d used ring: %w", q.Index, err)
	}
	return nil
}

// Kicks delivers one value after the driver notified the queue (several
// notifications may fold into one).
func (q *Queue) Kicks() <-chan struct{} { return q.kicks }

// Kick records a driver notification (what the kick eventfd does).
func (q *Queue) Kick() {
	select {
	case q.kicks <- struct{}{}:
	default:
	}
}

// Seg is one buffer of a chain: guest-physical address and length.
type Seg struct {
	Addr uint64
	Len  uint32
}

// Chain is a descriptor chain popped from the available ring: the
// device-readable buffers, then the device-writable ones.
type Chain struct {
	Head     uint16
	Readable []Seg
	Writable []Seg
}

// ReadableLen returns the bytes the driver gave to read.
func (c *Chain) ReadableLen() int { return segLen(c.Readable) }

// WritableLen returns the bytes the driver gave to write.
func (c *Chain) WritableLen() int { return segLen(c.Writable) }

func segLen(s []Seg) int {
	n := 0
	for _, x := range s {
		n += int(x.Len)
	}
	return n
}

// fence orders the memory accesses around it (an atomic read-modify-write
// is a full barrier on the architectures Go supports).
var fenceWord atomic.Uint32

func fence() { fenceWord.Add(1) }

// Pop returns the next chain the driver made available; ok is false when
// there is none. A malformed chain or ring is an error: the device is
// broken and the session should end.
func (q *Queue) Pop() (c Chain, ok bool, err error) {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.avail == nil {
		return Chain{}, false, nil
	}
	availIdx := binary.LittleEndian.Uint16(q.avail[2:])
	pending := availIdx - q.lastAvail
	if pending == 0 {
		return Chain{}, false, nil
	}
	if pending > q.size {
		return Chain{}, false, fmt.Errorf("%w: queue %d: available index %d is %d ahead of %d (size %d)", ErrProtocol, q.Index, availIdx, pending, q.lastAvail, q.size)
	}
	fence()
	head := binary.LittleEndian.Uint16(q.avail[4+2*uint32(q.lastAvail%q.size):])
	c, err = q.walk(head)
	if err != nil {
		return Chain{}, false, err
	}
	q.lastAvail++
	return c, true, nil
}

// Unpop gives back the chain the last Pop returned, unused.
func (q *Queue) Unpop() {
	q.mu.RLock()
	defer q.mu.RUnlock()
	q.lastAvail--
}

// walk follows the chain starting at head, through at most one indirect table.
func (q *Queue) walk(head uint16) (Chain, error) {
	c := Chain{Head: head}
	if head >= q.size {
		return c, fmt.Errorf("%w: queue %d: head %d beyond size %d", ErrProtocol, q.Index, head, q.size)
	}
	m := *q.mem
	table, n := q.desc, uint32(q.size)
	idx := uint32(head)
	total := uint64(0)
	indirect := false
	for steps := uint32(0); ; steps++ {
		if steps >= n {
			return c, fmt.Errorf("%w: queue %d: chain from %d longer than its table (%d): a loop", ErrProtocol, q.Index, head, n)
		}
		d := table[16*idx : 16*idx+16]
		addr := binary.LittleEndian.Uint64(d)
		length := binary.LittleEndian.Uint32(d[8:])
		flags := binary.LittleEndian.Uint16(d[12:])
		next := binary.LittleEndian.Uint16(d[14:])
		if flags&descIndirect != 0 {
			if !q.indirect || indirect || flags&descNext != 0 || steps != 0 {
				return c, fmt.Errorf("%w: queue %d: indirect descriptor %d not allowed here", ErrProtocol, q.Index, idx)
			}
			if length == 0 || length%16 != 0 || length/16 > MaxQueueSize {
				return c, fmt.Errorf("%w: queue %d: indirect table of %d bytes", ErrProtocol, q.Index, length)
			}
			t, err := m.Slice(addr, uint64(length))
			if err != nil {
				return c, fmt.Errorf("queue %d indirect table: %w", q.Index, err)
			}
			table, n, idx, indirect, steps = t, length/16, 0, true, ^uint32(0) // steps wraps to 0
			continue
		}
		if _, err := m.Slice(addr, uint64(length)); err != nil {
			return c, fmt.Errorf("queue %d descriptor %d: %w", q.Index, idx, err)
		}
		total += uint64(length)
		if total > maxChainBytes {
			return c, fmt.Errorf("%w: queue %d: chain of more than %d bytes", ErrProtocol, q.Index, maxChainBytes)
		}
		s := Seg{Addr: addr, Len: length}
		if flags&descWrite != 0 {
			c.Writable = append(c.Writable, s)
		} else {
			if len(c.Writable) > 0 {
				return c, fmt.Errorf("%w: queue %d: readable descriptor after a writable one", ErrProtocol, q.Index)
			}
			c.Readable = append(c.Readable, s)
		}
		if flags&descNext == 0 {
			return c, nil
		}
		if uint32(next) >= n {
			return c, fmt.Errorf("%w: queue %d: next %d beyond table of %d", ErrProtocol, q.Index, next, n)
		}
		idx = uint32(next)
	}
}

// Read copies the chain's readable bytes from offset off into p and
// returns how many it copied.
func (q *Queue) Read(c *Chain, off int, p []byte) (int, error) {
	q.mu.RLock()
	defer q.mu.RUnlock()
	return q.copySegs(c.Readable, off, p, false)
}

// Write copies p into the chain's writable buffers from offset off and
// returns how many bytes fit.
func (q *Queue) Write(c *Chain, off int, p []byte) (int, error) {
	q.mu.RLock()
	defer q.mu.RUnlock()
	return q.copySegs(c.Writable, off, p, true)
}

func (q *Queue) copySegs(segs []Seg, off int, p []byte, write bool) (int, error) {
	m := *q.mem
	done := 0
	for _, s := range segs {
		if len(p) == done {
			break
		}
		if off >= int(s.Len) {
			off -= int(s.Len)
			continue
		}
		b, err := m.Slice(s.Addr, uint64(s.Len))
		if err != nil {
			return done, fmt.Errorf("queue %d: %w", q.Index, err)
		}
		b = b[off:]
		off = 0
		var n int
		if write {
			n = copy(b, p[done:])
		} else {
			n = copy(p[done:], b)
		}
		done += n
	}
	return done, nil
}

// Push hands chain c back to the driver with written bytes in its
// writable buffers.
func (q *Queue) Push(c *Chain, written uint32) error {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.used == nil {
		return fmt.Errorf("%w: queue %d: push on a stopped ring", ErrProtocol, q.Index)
	}
	e := q.used[4+8*uint32(q.usedIdx%q.size):]
	binary.LittleEndian.PutUint32(e, uint32(c.Head))
	binary.LittleEndian.PutUint32(e[4:], written)
	fence()
	q.usedIdx++
	binary.LittleEndian.PutUint16(q.used[2:], q.usedIdx)
	fence()
	return nil
}

// Notify signals the driver through the call eventfd, unless it asked for
// no interrupts.
func (q *Queue) Notify() error {
	q.mu.RLock()
	suppress := q.avail != nil && binary.LittleEndian.Uint16(q.avail)&availNoInterrupt != 0
	q.mu.RUnlock()
	if suppress {
		return nil
	}
	q.callMu.Lock()
	defer q.callMu.Unlock()
	if q.call == nil {
		return nil
	}
	var one [8]byte
	binary.LittleEndian.PutUint64(one[:], 1)
	if _, err := q.call.Write(one[:]); err != nil && err != unix.EAGAIN {
		return fmt.Errorf("signalling queue %d: %w", q.Index, err)
	}
	return nil
}

func (q *Queue) setCall(f *os.File) {
	q.callMu.Lock()
	defer q.callMu.Unlock()
	if q.call != nil {
		q.call.Close()
	}
	q.call = f
}
