// Package qmp is a client of the QEMU Machine Protocol: JSON messages over a
// Unix socket, with a greeting, capability negotiation, commands matched to
// their answers by id, and asynchronous events.
//
// It is hand-written rather than taken from go-qemu, whose monitor takes no
// context, serialises commands behind one mutex and delivers events once
// per socket on the channel that also carries answers (docs/qemu.md).
//
// A Client is safe for concurrent use. When the socket closes (QEMU exited or
// the connection broke), every pending and later call fails promptly with an
// error that wraps ErrClosed, the event channel is closed, and the Client's
// goroutine ends.
package qmp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// ErrClosed is wrapped by the errors of calls made on, or pending when, the
// connection to QEMU closes.
var ErrClosed = errors.New("qmp connection closed")

// ErrProtocol is wrapped by errors about messages that do not follow QMP.
var ErrProtocol = errors.New("qmp protocol error")

// Error is an error answer from QEMU to a command.
type Error struct {
	Command string // the command that failed
	Class   string // QEMU's error class, e.g. "GenericError", "DeviceNotFound"
	Desc    string // QEMU's human-readable description
}

// Error returns the command, class and description.
func (e *Error) Error() string {
	return fmt.Sprintf("qmp command %q: %s: %s", e.Command, e.Class, e.Desc)
}

// Version is QEMU's version from the greeting.
type Version struct {
	Qemu struct {
		Major int `json:"major"`
		Minor int `json:"minor"`
		Micro int `json:"micro"`
	} `json:"qemu"`
	Package string `json:"package"`
}

// String returns the version as "major.minor.micro".
func (v Version) String() string {
	return fmt.Sprintf("%d.%d.%d", v.Qemu.Major, v.Qemu.Minor, v.Qemu.Micro)
}

// Greeting is the first message QEMU sends on a QMP connection.
type Greeting struct {
	Version      Version  `json:"version"`
	Capabilities []string `json:"capabilities"`
}

// Event is an asynchronous QMP event.
type Event struct {
	Name string          // e.g. "SHUTDOWN", "RESET", "VSERPORT_CHANGE"
	Data json.RawMessage // the event's data object, or nil
	Time time.Time       // QEMU's timestamp
}

// message is any message QEMU sends.
type message struct {
	QMP    *Greeting       `json:"QMP"`
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	ID        json.RawMessage `json:"id"`
	Event     string          `json:"event"`
	Data      json.RawMessage `json:"data"`
	Timestamp *struct {
		Seconds      int64 `json:"seconds"`
		Microseconds int64 `json:"microseconds"`
	} `json:"timestamp"`
}

// reply is what a pending call receives.
type reply struct {
	ret json.RawMessage
	err error
}

// Client is a connection to one QEMU's QMP monitor.
type Client struct {
	conn     net.Conn
	greeting Greeting

	writeMu sync.Mutex

	mu      sync.Mutex
	nextID  uint64
	pending map[string]chan reply
	err     error // set once the connection is closed

	done   chan struct{} // closed when the reader ended
	events chan Event

	evMu    sync.Mutex
	evQueue []Event
	evWake  chan struct{}
}

// Dial connects to the QMP Unix socket at path, reads the greeting and
// negotiates capabilities. It gives up when ctx ends.
func Dial(ctx context.Context, path string) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("connecting to qmp socket %q: %w", path, err)
	}
	c, err := New(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("qmp socket %q: %w", path, err)
	}
	return c, nil
}

// New runs the QMP handshake on conn (greeting, qmp_capabilities) and returns
// a Client that owns conn. On error conn is closed.
func New(ctx context.Context, conn net.Conn) (*Client, error) {
	r := bufio.NewReader(conn)
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Unix(1, 0)) })
	line, err := r.ReadBytes('\n')
	stopped := stop()
	if err != nil {
		conn.Close()
		if !stopped {
			return nil, fmt.Errorf("reading qmp greeting: %w", ctx.Err())
		}
		return nil, fmt.Errorf("reading qmp greeting: %w: %w", ErrClosed, err)
	}
	var m message
	if err := json.Unmarshal(line, &m); err != nil || m.QMP == nil {
		conn.Close()
		return nil, fmt.Errorf("reading qmp greeting: %w: unexpected first message %.100q", ErrProtocol, line)
	}
	c := &Client{
		conn:     conn,
		greeting: *m.QMP,
		pending:  make(map[string]chan reply),
		done:     make(chan struct{}),
		events:   make(chan Event),
		evWake:   make(chan struct{}, 1),
	}
	go c.read(r)
	go c.deliver()
	if err := c.Execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		c.Close()
		return nil, fmt.Errorf("negotiating qmp capabilities: %w", err)
	}
	return c, nil
}

// Greeting returns the greeting QEMU sent.
func (c *Client) Greeting() Greeting { return c.greeting }

// Events returns the channel of QMP events. Events are queued without bound
// so a slow reader never stalls command answers; the channel is closed after
// the connection closed and every queued event was delivered or Close was
// called.
func (c *Client) Events() <-chan Event { return c.events }

// Done returns a channel closed when the connection has closed.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns why the connection closed, or nil while it is open.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the connection; pending calls fail with ErrClosed.
func (c *Client) Close() error {
	err := c.conn.Close()
	<-c.done
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Execute runs command with args (nil, or a value that marshals to a JSON
// object) and unmarshals QEMU's return value into result (nil to ignore it).
// A QEMU error answer is returned as *Error. When ctx ends first Execute
// returns ctx's error; QEMU's late answer is then discarded.
func (c *Client) Execute(ctx context.Context, command string, args, result any) error {
	ret, err := c.ExecuteRaw(ctx, command, args)
	if err != nil {
		return err
	}
	if result != nil {
		if err := json.Unmarshal(ret, result); err != nil {
			return fmt.Errorf("qmp command %q: decoding answer: %w: %w", command, ErrProtocol, err)
		}
	}
	return nil
}

// ExecuteRaw runs command with args and returns QEMU's raw return value.
func (c *Client) ExecuteRaw(ctx context.Context, command string, args any) (json.RawMessage, error) {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, fmt.Errorf("qmp command %q: %w", command, err)
	}
	c.nextID++
	id := "gl-" + strconv.FormatUint(c.nextID, 10)
	ch := make(chan reply, 1)
	c.pending[id] = ch
	c.mu.Unlock()

	req := struct {
		Execute   string `json:"execute"`
		Arguments any    `json:"arguments,omitempty"`
		ID        string `json:"id"`
	}{command, args, id}
	b, err := json.Marshal(req)
	if err != nil {
		c.forget(id)
		return nil, fmt.Errorf("qmp command %q: encoding arguments: %w", command, err)
	}
	b = append(b, '\n')
	if err := c.write(ctx, b); err != nil {
		c.forget(id)
		return nil, fmt.Errorf("qmp command %q: %w", command, err)
	}
	select {
	case r := <-ch:
		if r.err != nil {
			var qe *Error
			if errors.As(r.err, &qe) {
				qe.Command = command
				return nil, qe
			}
			return nil, fmt.Errorf("qmp command %q: %w", command, r.err)
		}
		return r.ret, nil
	case <-ctx.Done():
		c.forget(id)
		return nil, fmt.Errorf("qmp command %q: %w", command, ctx.Err())
	}
}

func (c *Client) forget(id string) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// write sends one message, honouring ctx's deadline and cancellation.
func (c *Client) write(ctx context.Context, b []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if dl, ok := ctx.Deadline(); ok {
		c.conn.SetWriteDeadline(dl)
	} else {
		c.conn.SetWriteDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { c.conn.SetWriteDeadline(time.Unix(1, 0)) })
	_, err := c.conn.Write(b)
	if !stop() && err != nil {
		return ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return nil
}

// read dispatches QEMU's messages until the connection closes.
func (c *Client) read(r *bufio.Reader) {
	dec := json.NewDecoder(r)
	var cause error
	for {
		var m message
		if err := dec.Decode(&m); err != nil {
			cause = err
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				var se *json.SyntaxError
				if errors.As(err, &se) {
					cause = fmt.Errorf("%w: %w", ErrProtocol, err)
				}
			}
			break
		}
		switch {
		case m.Event != "":
			ev := Event{Name: m.Event, Data: m.Data}
			if m.Timestamp != nil {
				ev.Time = time.Unix(m.Timestamp.Seconds, m.Timestamp.Microseconds*1000)
			}
			c.evMu.Lock()
			c.evQueue = append(c.evQueue, ev)
			c.evMu.Unlock()
			select {
			case c.evWake <- struct{}{}:
			default:
			}
		case m.ID != nil:
			var id string
			if json.Unmarshal(m.ID, &id) != nil {
				continue // not one of ours
			}
			c.mu.Lock()
			ch, ok := c.pending[id]
			delete(c.pending, id)
			c.mu.Unlock()
			if !ok {
				continue // the caller gave up
			}
			if m.Error != nil {
				ch <- reply{err: &Error{Class: m.Error.Class, Desc: m.Error.Desc}}
			} else {
				ch <- reply{ret: m.Return}
			}
		}
		// Answers without an id are not ours (every command we send has one).
	}
	c.conn.Close()
	c.mu.Lock()
	c.err = fmt.Errorf("%w: %w", ErrClosed, cause)
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	for _, ch := range pending {
		ch <- reply{err: c.err}
	}
	close(c.done)
}

// deliver moves queued events to the events channel. After the connection
// closed it keeps delivering what is queued while someone reads, and gives
// up after a second without a reader, so it never outlives the Client for
// long.
func (c *Client) deliver() {
	defer close(c.events)
	closed := false
	for {
		ev, ok := c.pop()
		if !ok {
			if closed {
				return
			}
			select {
			case <-c.evWake:
				continue
			case <-c.done:
				closed = true
				continue
			}
		}
		if !closed {
			select {
			case c.events <- ev:
				continue
			case <-c.done:
				closed = true
			}
		}
		t := time.NewTimer(time.Second)
		select {
		case c.events <- ev:
			t.Stop()
		case <-t.C:
			return
		}
	}
}

// pop takes the oldest queued event.
func (c *Client) pop() (Event, bool) {
	c.evMu.Lock()
	defer c.evMu.Unlock()
	if len(c.evQueue) == 0 {
		return Event{}, false
	}
	ev := c.evQueue[0]
	c.evQueue[0] = Event{}
	c.evQueue = c.evQueue[1:]
	return ev, true
}
