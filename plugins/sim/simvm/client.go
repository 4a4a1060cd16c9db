package simvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
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
