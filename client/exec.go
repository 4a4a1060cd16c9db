package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/errdefs"
)

// ExecIO connects the streams of an exec.
type ExecIO struct {
	// Stdin is the command's input (nil: none, end of input at once).
	Stdin io.Reader
	// Stdout and Stderr receive the command's output as it comes (nil:
	// discarded). An interactive command's terminal goes to Stdout.
	Stdout, Stderr io.Writer
	// Resize delivers new terminal sizes to send (interactive).
	Resize <-chan TermSize
	// Signal delivers signal numbers to send to the command.
	Signal <-chan int
}

// TermSize is a terminal's size in characters.
type TermSize struct{ Width, Height int }

// Exec runs req.Command in the instance called name (POST
// /1.0/instances/{name}/exec, then its websockets) and returns the
// command's exit code once it has ended and its output was delivered.
// API errors are *StatusError (409 when the instance's agent is not
// connected).
func (c *Client) Exec(ctx context.Context, name string, req api.ExecPost, streams ExecIO) (int, error) {
	req.WaitForWS = true
	var op api.Operation
	if err := c.do(ctx, http.MethodPost, instancePath(name, "exec"), nil, req, &op); err != nil {
		return 0, err
	}
	conns := map[string]*websocket.Conn{}
	defer func() {
		for _, conn := range conns {
			conn.Close()
		}
	}()
	// Control first: the agent kills the command if control closes.
	order := []string{api.ExecFDControl, api.ExecFDStdin, api.ExecFDStdout, api.ExecFDStderr}
	for _, fd := range order {
		secret, ok := op.Metadata.FDs[fd]
		if !ok {
			continue
		}
		conn, err := c.dialOperation(ctx, op.ID, secret)
		if err != nil {
			return 0, fmt.Errorf("connecting websocket %s of exec in instance %q: %w", fd, name, err)
		}
		conns[fd] = conn
	}
	if conns[api.ExecFDStdin] == nil || conns[api.ExecFDControl] == nil {
		return 0, fmt.Errorf("exec in instance %q: the operation has no stdin or control websocket", name)
	}

	stopControl := make(chan struct{})
	controlDone := make(chan struct{})
	go func() {
		defer close(controlDone)
		c.sendControl(conns[api.ExecFDControl], streams, stopControl)
	}()

	var outputs sync.WaitGroup
	in := conns[api.ExecFDStdin]
	if req.Interactive {
		outputs.Add(1)
		go func() { defer outputs.Done(); recvStream(in, streams.Stdout) }()
		go sendStream(in, streams.Stdin, false)
	} else {
		outputs.Add(2)
		go func() { defer outputs.Done(); recvStream(conns[api.ExecFDStdout], streams.Stdout) }()
		go func() { defer outputs.Done(); recvStream(conns[api.ExecFDStderr], streams.Stderr) }()
		go sendStream(in, streams.Stdin, true)
	}
	outDone := make(chan struct{})
	go func() { outputs.Wait(); close(outDone) }()
	select {
	case <-outDone:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	var done api.Operation
	err := c.do(ctx, http.MethodGet, "/1.0/operations/"+url.PathEscape(op.ID)+"/wait", nil, nil, &done)
	close(stopControl)
	<-controlDone
	if err != nil {
		return 0, fmt.Errorf("waiting for exec in instance %q: %w", name, err)
	}
	if done.StatusCode != api.OperationSuccessCode || done.Metadata.Return == nil {
		return 0, fmt.Errorf("exec in instance %q failed: %s", name, done.Err)
	}
	return *done.Metadata.Return, nil
}

// dialOperation opens one websocket of an operation.
func (c *Client) dialOperation(ctx context.Context, id, secret string) (*websocket.Conn, error) {
	d := websocket.Dialer{NetDialContext: c.dial, TLSClientConfig: c.tls, HandshakeTimeout: 30 * time.Second,
		ReadBufferSize: 32 << 10, WriteBufferSize: 32 << 10}
	path := "/1.0/operations/" + url.PathEscape(id) + "/websocket"
	h := http.Header{}
	c.authorize(h)
	conn, resp, err := d.DialContext(ctx, c.wsBase+path+"?secret="+url.QueryEscape(secret), h)
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			defer resp.Body.Close()
			return nil, decodeResponse(resp, "GET "+path, nil)
		}
		return nil, fmt.Errorf("GET %s: daemon %w at %s: %w", path, errdefs.ErrUnavailable, c.addr, err)
	}
	return conn, nil
}

// sendControl writes resizes and signals to the control websocket until
// stop, then closes it.
func (c *Client) sendControl(conn *websocket.Conn, streams ExecIO, stop <-chan struct{}) {
	defer func() {
		_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	}()
	for {
		var m api.ExecControl
		select {
		case <-stop:
			return
		case sz, ok := <-streams.Resize:
			if !ok {
				streams.Resize = nil
				continue
			}
			m = api.ExecControl{Command: api.ExecControlResize, Args: map[string]string{
				"width": strconv.Itoa(sz.Width), "height": strconv.Itoa(sz.Height)}}
		case sig, ok := <-streams.Signal:
			if !ok {
				streams.Signal = nil
				continue
			}
			m = api.ExecControl{Command: api.ExecControlSignal, Signal: sig}
		}
		b, _ := json.Marshal(m)
		if err := conn.WriteMessage(websocket.TextMessage, b); err != nil {
			return
		}
	}
}

// sendStream writes r to conn as binary messages; at its end, with eof,
// an empty text message (end of input).
func sendStream(conn *websocket.Conn, r io.Reader, eof bool) {
	if r != nil {
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				if werr := conn.WriteMessage(websocket.BinaryMessage, buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				break
			}
		}
	}
	if eof {
		_ = conn.WriteMessage(websocket.TextMessage, nil)
	}
}

// recvStream writes conn's binary messages to w until the end of the
// stream (an empty text message, a close, an error).
func recvStream(conn *websocket.Conn, w io.Writer) {
	if w == nil {
		w = io.Discard
	}
	for {
		mt, data, err := conn.ReadMessage()
		if err != nil || mt == websocket.TextMessage {
			return
		}
		if _, err := w.Write(data); err != nil {
			w = io.Discard
		}
	}
}

// Operation returns the operation id (GET /1.0/operations/{id}); only the
// identity that started it finds it (others get 404).
func (c *Client) Operation(ctx context.Context, id string) (*api.Operation, error) {
	var op api.Operation
	if err := c.do(ctx, http.MethodGet, "/1.0/operations/"+url.PathEscape(id), nil, nil, &op); err != nil {
		return nil, err
	}
	return &op, nil
}
