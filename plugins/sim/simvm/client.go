package simvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"
)

// ErrNotRunning is the kind of error a Client returns when no VMM answers on
// the control socket.
var ErrNotRunning = errors.New("vmm not running")

// DefaultTimeout bounds a control command whose context has no deadline.
const DefaultTimeout = 10 * time.Second

// CommandError is a command the VMM answered with an error.
type CommandError struct {
	Command string
	Class   string
	Desc    string
}

// Error returns the command, the error class and the VMM's description.
func (e *CommandError) Error() string {
	return fmt.Sprintf("vmm command %s: %s: %s", e.Command, e.Class, e.Desc)
}

// Client speaks the control protocol to the VMM of one guest directory. It
// keeps no connection: every command dials, so it survives VMM restarts and
// is safe for concurrent use.
type Client struct {
	Socket string // the control socket
}

// NewClient returns a client of the VMM of guest directory p.
func NewClient(p Paths) *Client { return &Client{Socket: p.Control()} }

type session struct {
	nc       net.Conn
	dec      *json.Decoder
	greeting Greeting
}

func (c *Client) dial(ctx context.Context) (*session, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("dialing vmm at %s: %w", c.Socket, ErrNotRunning)
		}
		return nil, fmt.Errorf("dialing vmm at %s: %w", c.Socket, err)
	}
	s := &session{nc: nc, dec: json.NewDecoder(nc)}
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	} else {
		nc.SetDeadline(time.Now().Add(DefaultTimeout))
	}
	if err := s.dec.Decode(&s.greeting); err != nil {
		nc.Close()
		return nil, fmt.Errorf("reading vmm greeting on %s: %w", c.Socket, notRunningOnEOF(err))
	}
	if s.greeting.SIM.Version != ProtocolVersion {
		nc.Close()
		return nil, fmt.Errorf("vmm at %s speaks protocol version %d, want %d", c.Socket, s.greeting.SIM.Version, ProtocolVersion)
	}
	return s, nil
}

// notRunningOnEOF turns a connection closed by an exiting VMM into
// ErrNotRunning.
func notRunningOnEOF(err error) error {
	var se syscall.Errno
	if errors.Is(err, errEOF) || errors.As(err, &se) && (se == syscall.ECONNRESET || se == syscall.EPIPE) {
		return fmt.Errorf("%w (%w)", ErrNotRunning, err)
	}
	return err
}

func (s *session) execute(ctx context.Context, command string, args, ret any) error {
	stop := context.AfterFunc(ctx, func() { s.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := s.send(command, args); err != nil {
		return err
	}
	return s.receive(ctx, command, ret)
}

// send writes one command.
func (s *session) send(command string, args any) error {
	req := Request{Execute: command}
	if args != nil {
		raw, err := json.Marshal(args)
		if err != nil {
			return fmt.Errorf("encoding %s arguments: %w", command, err)
		}
		req.Arguments = raw
	}
	data, _ := json.Marshal(req)
	if _, err := s.nc.Write(append(data, '\n')); err != nil {
		return fmt.Errorf("sending %s: %w", command, notRunningOnEOF(err))
	}
	return nil
}

// receive reads the answer of command into ret (nil to ignore it).
func (s *session) receive(ctx context.Context, command string, ret any) error {
	var resp Response
	if err := s.dec.Decode(&resp); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for %s: %w", command, ctx.Err())
		}
		return fmt.Errorf("reading %s answer: %w", command, notRunningOnEOF(err))
	}
	if resp.Error != nil {
		return &CommandError{Command: command, Class: resp.Error.Class, Desc: resp.Error.Desc}
	}
	if ret != nil {
		if err := json.Unmarshal(resp.Return, ret); err != nil {
			return fmt.Errorf("decoding %s answer: %w", command, err)
		}
	}
	return nil
}

// Execute runs one command with args (nil for none) and decodes its answer
// into ret (nil to ignore it).
func (c *Client) Execute(ctx context.Context, command string, args, ret any) error {
	s, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer s.nc.Close()
	return s.execute(ctx, command, args, ret)
}

// Status returns the VMM's status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var st Status
	if err := c.Execute(ctx, CmdStatus, nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// ReadRing consumes and returns up to size bytes of the ring buffer.
func (c *Client) ReadRing(ctx context.Context, size int) ([]byte, error) {
	var ret RingbufReadReturn
	if err := c.Execute(ctx, CmdRingbufRead, RingbufReadArgs{Size: size}, &ret); err != nil {
		return nil, err
	}
	if ret.Data == nil {
		ret.Data = []byte{}
	}
	return ret.Data, nil
}

// Subscription is a control connection receiving the VMM's events.
type Subscription struct {
	s *session
	// VMMPID is the pid the VMM announced in its greeting.
	VMMPID int
}

// Subscribe opens a connection that receives every event from now on. ctx
// bounds only the subscription's set-up; Close ends it.
func (c *Client) Subscribe(ctx context.Context) (*Subscription, error) {
	s, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.execute(ctx, CmdSubscribe, nil, nil); err != nil {
		s.nc.Close()
		return nil, err
	}
	s.nc.SetDeadline(time.Time{})
	return &Subscription{s: s, VMMPID: s.greeting.SIM.VMMPID}, nil
}

// Next waits for the next event. It returns an error wrapping io.EOF once the
// VMM closed the connection (it does so when it exits).
func (sub *Subscription) Next() (*Event, error) {
	for {
		var msg struct {
			Event
			Return json.RawMessage `json:"return"`
		}
		if err := sub.s.dec.Decode(&msg); err != nil {
			return nil, fmt.Errorf("reading vmm event: %w", err)
		}
		if msg.Event.Event == "" {
			continue // a command answer, not an event
		}
		ev := msg.Event
		return &ev, nil
	}
}

// Close ends the subscription.
func (sub *Subscription) Close() error { return sub.s.nc.Close() }

// Conn is a client that keeps its control connection to one running VMM
// between commands, for frequent short commands such as ringbuf-read: a
// command takes the idle connection (or dials a new one when another command
// holds it) and gives it back when done, so Conn is safe for concurrent use.
// A kept connection the VMM has closed (it exited or restarted) is noticed
// when the command cannot be sent, and the command is sent once more on a
// fresh connection; a command that was sent is never repeated, since
// ringbuf-read consumes what it returns.
type Conn struct {
	client Client

	mu     sync.Mutex
	idle   *session
	closed bool
}

// NewConn returns a connection-keeping client of the VMM of guest directory
// p. It dials on first use; Close releases it.
func NewConn(p Paths) *Conn { return &Conn{client: Client{Socket: p.Control()}} }

// Execute runs one command with args (nil for none) and decodes its answer
// into ret (nil to ignore it).
func (c *Conn) Execute(ctx context.Context, command string, args, ret any) error {
	c.mu.Lock()
	s, reused := c.idle, c.idle != nil
	c.idle = nil
	c.mu.Unlock()
	if s == nil {
		var err error
		if s, err = c.client.dial(ctx); err != nil {
			return err
		}
	}
	stop := context.AfterFunc(ctx, func() { s.nc.SetDeadline(time.Unix(1, 0)) })
	if dl, ok := ctx.Deadline(); ok {
		s.nc.SetDeadline(dl)
	} else {
		s.nc.SetDeadline(time.Now().Add(DefaultTimeout))
	}
	err := s.send(command, args)
	if err != nil && reused && ctx.Err() == nil {
		// The kept connection went stale while idle: nothing was sent.
		stop()
		s.nc.Close()
		if s, err = c.client.dial(ctx); err != nil {
			return err
		}
		stop = context.AfterFunc(ctx, func() { s.nc.SetDeadline(time.Unix(1, 0)) })
		err = s.send(command, args)
	}
	if err == nil {
		err = s.receive(ctx, command, ret)
	}
	if !stop() { // ctx ended: the deadline was forced, the connection is unusable
		s.nc.Close()
		return err
	}
	var ce *CommandError
	if err != nil && !errors.As(err, &ce) {
		s.nc.Close() // out of step with the VMM, or the VMM went away
		return err
	}
	c.release(s)
	return err
}

// release keeps s as the idle connection, or closes it if one is kept
// already or Close was called.
func (c *Conn) release(s *session) {
	c.mu.Lock()
	if c.idle == nil && !c.closed {
		c.idle, s = s, nil
	}
	c.mu.Unlock()
	if s != nil {
		s.nc.Close()
	}
}

// ReadRing consumes and returns up to size bytes of the ring buffer.
func (c *Conn) ReadRing(ctx context.Context, size int) ([]byte, error) {
	var ret RingbufReadReturn
	if err := c.Execute(ctx, CmdRingbufRead, RingbufReadArgs{Size: size}, &ret); err != nil {
		return nil, err
	}
	if ret.Data == nil {
		ret.Data = []byte{}
	}
	return ret.Data, nil
}

// Close closes the kept connection; commands still running close theirs
// when they end. Execute may still be called and then dials per command.
func (c *Conn) Close() error {
	c.mu.Lock()
	s := c.idle
	c.idle, c.closed = nil, true
	c.mu.Unlock()
	if s != nil {
		return s.nc.Close()
	}
	return nil
}
