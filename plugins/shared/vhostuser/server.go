package vhostuser

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Device is what a vhost-user device supplies to the session.
type Device interface {
	// Features returns the virtio feature bits the device offers (device
	// bits and ring bits; the session adds VHOST_USER_F_PROTOCOL_FEATURES).
	Features() uint64
	// NumQueues returns the number of virtqueues.
	NumQueues() int
	// Config returns the device's config space (virtio "Device
	// configuration layout").
	Config() []byte
	// RunQueue serves queue q until stop is closed; the session calls it in
	// a goroutine of its own when the ring is started and enabled, and
	// waits for it to return before it changes or stops the ring. An
	// error ends the session (a broken ring is a broken device).
	RunQueue(q *Queue, stop <-chan struct{}) error
	// Reset is called when the front-end resets the device (RESET_OWNER,
	// RESET_DEVICE) and when the session ends, after every queue stopped.
	Reset()
}

// protocolFeatures are the protocol features this back-end implements.
const protocolFeatures = ProtocolReplyAck | ProtocolConfig

// Session is one front-end connection.
type Session struct {
	dev    Device
	conn   *net.UnixConn
	mu     sync.RWMutex // guards mem and the rings' slices
	mem    *Memory
	queues []*Queue

	features, protocol uint64
	owner              bool
	errs               chan error
}

// NewSession returns a session serving dev on conn.
func NewSession(conn *net.UnixConn, dev Device) *Session {
	s := &Session{dev: dev, conn: conn, errs: make(chan error, dev.NumQueues())}
	for i := range dev.NumQueues() {
		s.queues = append(s.queues, &Queue{Index: i, mu: &s.mu, mem: &s.mem, kicks: make(chan struct{}, 1)})
	}
	return s
}

// Serve reads messages until the front-end hangs up (nil) or sends
// something this back-end refuses (an error wrapping ErrProtocol, or an
// I/O error); either way every queue is stopped, the memory unmapped and
// the connection closed before it returns.
func (s *Session) Serve() error {
	defer s.close()
	buf := make([]byte, HeaderSize+MaxPayload)
	oob := make([]byte, unix.CmsgSpace(MaxFDs*4))
	for {
		hdr, payload, fds, err := s.read(buf, oob)
		if err != nil {
			select {
			case qerr := <-s.errs:
				return qerr
			default:
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		reply, err := s.Handle(hdr, payload, fds)
		if err != nil {
			return err
		}
		if reply == nil && hdr.NeedReply() && s.protocol&ProtocolReplyAck != 0 {
			reply = formatReply(hdr.Request, u64Payload(0))
		}
		if reply != nil {
			if _, err := s.conn.Write(reply); err != nil {
				return fmt.Errorf("replying to request %d: %w", hdr.Request, err)
			}
		}
		select {
		case err := <-s.errs:
			return err
		default:
		}
	}
}

// read reads one message: the header with its fds, then the payload.
func (s *Session) read(buf, oob []byte) (Header, []byte, []int, error) {
	n, oobn, _, _, err := s.conn.ReadMsgUnix(buf[:HeaderSize], oob)
	if err != nil {
		return Header{}, nil, nil, err
	}
	fds, ferr := parseFDs(oob[:oobn])
	closeAll := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if ferr != nil {
		closeAll()
		return Header{}, nil, nil, ferr
	}
	if n == 0 {
		closeAll()
		return Header{}, nil, nil, io.EOF
	}
	if n < HeaderSize {
		if _, err := io.ReadFull(s.conn, buf[n:HeaderSize]); err != nil {
			closeAll()
			return Header{}, nil, nil, fmt.Errorf("%w: truncated header: %v", ErrProtocol, err)
		}
	}
	h, err := ParseHeader(buf[:HeaderSize])
	if err != nil {
		closeAll()
		return Header{}, nil, nil, err
	}
	p := buf[HeaderSize : HeaderSize+int(h.Size)]
	if _, err := io.ReadFull(s.conn, p); err != nil {
		closeAll()
		return Header{}, nil, nil, fmt.Errorf("%w: request %d: truncated payload: %v", ErrProtocol, h.Request, err)
	}
	return h, p, fds, nil
}

func parseFDs(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("%w: control message: %v", ErrProtocol, err)
	}
	var fds []int
	for _, m := range msgs {
		f, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		fds = append(fds, f...)
	}
	if len(fds) > MaxFDs {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("%w: %d file descriptors in one message", ErrProtocol, len(fds))
	}
	return fds, nil
}

// Handle applies one message and returns the reply to send (nil for none).
// It owns fds: they are kept or closed. Serve calls it; fuzz targets call it
// with garbage.
func (s *Session) Handle(h Header, p []byte, fds []int) (reply []byte, err error) {
	used := 0 // fds taken over
	defer func() {
		for _, fd := range fds[used:] {
			unix.Close(fd)
		}
	}()
	switch h.Request {
	case GetFeatures:
		return formatReply(h.Request, u64Payload(s.dev.Features()|FeatureProtocolFeatures)), nil
	case SetFeatures:
		v, err := parseU64(h.Request, p)
		if err != nil {
			return nil, err
		}
		if v&^(s.dev.Features()|FeatureProtocolFeatures) != 0 {
			return nil, fmt.Errorf("%w: SET_FEATURES %#x beyond the offered %#x", ErrProtocol, v, s.dev.Features()|FeatureProtocolFeatures)
		}
		s.features = v
		for _, q := range s.queues {
			q.indirect = v&FeatureIndirectDesc != 0
			if v&FeatureProtocolFeatures == 0 && q.kick != nil {
				q.enabled = true
			}
		}
		return nil, s.startReady()
	case GetProtocolFeatures:
		return formatReply(h.Request, u64Payload(protocolFeatures)), nil
	case SetProtocolFeatures:
		v, err := parseU64(h.Request, p)
		if err != nil {
			return nil, err
		}
		if v&^protocolFeatures != 0 {
			return nil, fmt.Errorf("%w: SET_PROTOCOL_FEATURES %#x beyond the offered %#x", ErrProtocol, v, protocolFeatures)
		}
		s.protocol = v
		return nil, nil
	case SetOwner:
		s.owner = true
		return nil, nil
	case ResetOwner, ResetDevice:
		s.reset()
		return nil, nil
	case GetQueueNum:
		return formatReply(h.Request, u64Payload(uint64(len(s.queues)))), nil
	case GetMaxMemSlots:
		return formatReply(h.Request, u64Payload(maxRegions)), nil
	case GetConfig:
		c, _, err := parseConfig(h.Request, p)
		if err != nil {
			return nil, err
		}
		space := s.dev.Config()
		out := make([]byte, c.Size)
		if uint64(c.Offset) < uint64(len(space)) {
			copy(out, space[c.Offset:])
		}
		return formatReply(h.Request, c.bytes(out)), nil
	case SetConfig:
		if _, _, err := parseConfig(h.Request, p); err != nil {
			return nil, err
		}
		return nil, nil // the vsock config space is read-only; writes are ignored
	case SetMemTable:
		descs, err := parseMemTable(p)
		if err != nil {
			return nil, err
		}
		used = len(fds)
		m, err := mapRegions(descs, fds)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		old := s.mem
		s.mem = m
		for _, q := range s.queues {
			if q.addrSet {
				if err := q.resolve(); err != nil {
					return nil, err
				}
			}
		}
		old.Close()
		return nil, nil
	case SetVringNum:
		st, q, err := s.vringState(h.Request, p)
		if err != nil {
			return nil, err
		}
		if st.Num == 0 || st.Num > MaxQueueSize || st.Num&(st.Num-1) != 0 {
			return nil, fmt.Errorf("%w: SET_VRING_NUM: queue %d size %d", ErrProtocol, st.Index, st.Num)
		}
		if q.running {
			return nil, fmt.Errorf("%w: SET_VRING_NUM on running queue %d", ErrProtocol, st.Index)
		}
		q.size = uint16(st.Num)
		return nil, nil
	case SetVringAddr:
		a, err := parseVringAddr(p)
		if err != nil {
			return nil, err
		}
		q, err := s.queue(h.Request, a.Index)
		if err != nil {
			return nil, err
		}
		if q.running || q.size == 0 {
			return nil, fmt.Errorf("%w: SET_VRING_ADDR on queue %d (running %v, size %d)", ErrProtocol, a.Index, q.running, q.size)
		}
		s.mu.Lock()
		q.addr, q.addrSet = a, true
		err = q.resolve()
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return nil, s.startReady()
	case SetVringBase:
		st, q, err := s.vringState(h.Request, p)
		if err != nil {
			return nil, err
		}
		if q.running || st.Num > 0xffff {
			return nil, fmt.Errorf("%w: SET_VRING_BASE %d on queue %d", ErrProtocol, st.Num, st.Index)
		}
		q.lastAvail, q.usedIdx = uint16(st.Num), uint16(st.Num)
		return nil, nil
	case GetVringBase:
		st, q, err := s.vringState(h.Request, p)
		if err != nil {
			return nil, err
		}
		s.stopQueue(q)
		if q.kick != nil {
			q.kick.Close()
			q.kick = nil
		}
		q.enabled = false
		return formatReply(h.Request, VringState{Index: st.Index, Num: uint32(q.lastAvail)}.bytes()), nil
	case SetVringKick, SetVringCall, SetVringErr:
		idx, noFD, err := vringFD(h.Request, p)
		if err != nil {
			return nil, err
		}
		q, err := s.queue(h.Request, uint32(idx))
		if err != nil {
			return nil, err
		}
		var f *os.File
		if !noFD {
			if len(fds) != 1 {
				return nil, fmt.Errorf("%w: request %d for queue %d with %d fds, want 1", ErrProtocol, h.Request, idx, len(fds))
			}
			used = 1
			f = newEventFile(fds[0], h.Request)
		}
		switch h.Request {
		case SetVringErr:
			if f != nil {
				f.Close()
			}
		case SetVringCall:
			q.setCall(f)
		case SetVringKick:
			s.stopQueue(q)
			if q.kick != nil {
				q.kick.Close()
			}
			q.kick = f
			if f == nil {
				return nil, fmt.Errorf("%w: SET_VRING_KICK without an fd (polling) is not supported", ErrProtocol)
			}
			go watchKicks(f, q)
			if s.features&FeatureProtocolFeatures == 0 {
				q.enabled = true
			}
			return nil, s.startReady()
		}
		return nil, nil
	case SetVringEnable:
		st, q, err := s.vringState(h.Request, p)
		if err != nil {
			return nil, err
		}
		if st.Num > 1 {
			return nil, fmt.Errorf("%w: SET_VRING_ENABLE %d", ErrProtocol, st.Num)
		}
		q.enabled = st.Num == 1
		if !q.enabled {
			s.stopQueue(q)
			return nil, nil
		}
		return nil, s.startReady()
	case SetLogBase, SetLogFD, SetBackendReqFD:
		return nil, fmt.Errorf("%w: request %d needs a protocol feature that was not offered", ErrProtocol, h.Request)
	case SetStatus, GetStatus:
		return nil, fmt.Errorf("%w: request %d needs the STATUS protocol feature, not offered", ErrProtocol, h.Request)
	default:
		return nil, fmt.Errorf("%w: unknown request %d", ErrProtocol, h.Request)
	}
}

func newEventFile(fd int, req Request) *os.File {
	_ = unix.SetNonblock(fd, true)
	return os.NewFile(uintptr(fd), fmt.Sprintf("vhost-user-%d", req))
}

// watchKicks turns the kick eventfd's reads into q.Kick until it is closed.
func watchKicks(f *os.File, q *Queue) {
	var b [8]byte
	for {
		if _, err := f.Read(b[:]); err != nil {
			return
		}
		q.Kick()
	}
}

func (s *Session) vringState(req Request, p []byte) (VringState, *Queue, error) {
	st, err := parseVringState(req, p)
	if err != nil {
		return st, nil, err
	}
	q, err := s.queue(req, st.Index)
	return st, q, err
}

func (s *Session) queue(req Request, i uint32) (*Queue, error) {
	if uint64(i) >= uint64(len(s.queues)) {
		return nil, fmt.Errorf("%w: request %d: queue %d of %d", ErrProtocol, req, i, len(s.queues))
	}
	return s.queues[i], nil
}

// startReady starts every queue that has its addresses, a kick and is enabled.
func (s *Session) startReady() error {
	for _, q := range s.queues {
		if q.running || !q.enabled || q.kick == nil || !q.addrSet || q.size == 0 {
			continue
		}
		q.running = true
		q.stop, q.done = make(chan struct{}), make(chan struct{})
		q.Kick() // look at the ring once: the driver may have filled it already
		go func(q *Queue, stop <-chan struct{}, done chan<- struct{}) {
			defer close(done)
			if err := s.dev.RunQueue(q, stop); err != nil {
				select {
				case s.errs <- err:
				default:
				}
				// Unblock Serve's read so the error ends the session.
				s.conn.CloseRead()
			}
		}(q, q.stop, q.done)
	}
	return nil
}

func (s *Session) stopQueue(q *Queue) {
	if !q.running {
		return
	}
	close(q.stop)
	<-q.done
	q.running = false
}

// reset stops every queue and forgets the rings, the features and the memory.
func (s *Session) reset() {
	for _, q := range s.queues {
		s.stopQueue(q)
		if q.kick != nil {
			q.kick.Close()
			q.kick = nil
		}
		q.setCall(nil)
		q.enabled, q.addrSet, q.size, q.lastAvail, q.usedIdx = false, false, 0, 0, 0
		q.desc, q.avail, q.used = nil, nil, nil
	}
	s.dev.Reset()
	s.mu.Lock()
	s.mem.Close()
	s.mem = nil
	s.mu.Unlock()
	s.features, s.protocol, s.owner = 0, 0, false
}

func (s *Session) close() {
	s.reset()
	s.conn.Close()
}
