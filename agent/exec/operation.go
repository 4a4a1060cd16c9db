package exec

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	osexec "os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"github.com/gorilla/websocket"

	"github.com/guestlink/guestlink/api"
)

// operation is one exec: its secrets, its websockets as they connect, and
// its state.
type operation struct {
	id      string
	req     api.ExecPost
	cmd     *osexec.Cmd
	secrets map[string]string // fd name -> secret
	created time.Time

	mu      sync.Mutex
	claimed map[string]bool
	conns   map[string]*websocket.Conn
	all     chan struct{} // closed once every fd is connected
	updated time.Time
	status  string
	code    int
	err     string
	ret     *int

	done chan struct{} // closed when the operation has ended
	log  *slog.Logger
}

func newOperation(req *api.ExecPost, cmd *osexec.Cmd) *operation {
	now := time.Now().UTC()
	op := &operation{
		id: newID(), req: *req, cmd: cmd, created: now, updated: now,
		secrets: map[string]string{},
		claimed: map[string]bool{}, conns: map[string]*websocket.Conn{},
		all: make(chan struct{}), done: make(chan struct{}),
		status: api.OperationRunning, code: api.OperationRunningCode,
	}
	if req.WaitForWS {
		fds := []string{api.ExecFDStdin, api.ExecFDStdout, api.ExecFDStderr, api.ExecFDControl}
		if req.Interactive {
			fds = []string{api.ExecFDStdin, api.ExecFDControl}
		}
		for _, fd := range fds {
			op.secrets[fd] = newSecret()
		}
	} else {
		close(op.all)
	}
	return op
}

// snapshot returns the operation object.
func (op *operation) snapshot() api.Operation {
	op.mu.Lock()
	defer op.mu.Unlock()
	o := api.Operation{
		ID: op.id, Class: api.OperationClassWebsocket, Description: "Executing command",
		CreatedAt: op.created, UpdatedAt: op.updated, Status: op.status, StatusCode: op.code,
		Resources: map[string][]string{}, Err: op.err, Location: "none",
	}
	if !op.req.WaitForWS {
		o.Class = api.OperationClassTask
	}
	if op.code == api.OperationRunningCode && len(op.secrets) > 0 {
		o.Metadata.FDs = op.secrets
	}
	if op.ret != nil {
		r := *op.ret
		o.Metadata.Return = &r
	}
	return o
}

// claim reserves fd for a connecting websocket; false if it is taken or
// the operation no longer waits for it.
func (op *operation) claim(fd string) bool {
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.claimed[fd] || op.code != api.OperationRunningCode {
		return false
	}
	op.claimed[fd] = true
	return true
}

func (op *operation) unclaim(fd string) {
	op.mu.Lock()
	defer op.mu.Unlock()
	delete(op.claimed, fd)
}

// connect hands a connected websocket to the operation.
func (op *operation) connect(fd string, c *websocket.Conn) {
	op.mu.Lock()
	defer op.mu.Unlock()
	select {
	case <-op.all:
		// Too late (timed out): nobody will serve it.
		_ = c.Close()
		return
	default:
	}
	op.conns[fd] = c
	if len(op.conns) == len(op.secrets) {
		close(op.all)
	}
}

// finish records the end of the operation.
func (op *operation) finish(ret int, err error) {
	op.mu.Lock()
	op.updated = time.Now().UTC()
	if err != nil {
		op.status, op.code, op.err = api.OperationFailure, api.OperationFailureCode, err.Error()
	} else {
		op.status, op.code = api.OperationSuccess, api.OperationSuccessCode
		op.ret = &ret
	}
	op.mu.Unlock()
	close(op.done)
}

// run waits for the websockets, runs the command and records its end.
func (op *operation) run(timeout time.Duration, log *slog.Logger) {
	op.log = log
	t := time.NewTimer(timeout)
	select {
	case <-op.all:
		t.Stop()
	case <-t.C:
		op.mu.Lock()
		select {
		case <-op.all:
		default:
			close(op.all)
		}
		conns := op.conns
		op.mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
		op.finish(0, errWebsocketTimeout)
		log.Warn("exec: websockets did not connect", "operation", op.id, "timeout", timeout)
		return
	}
	var ret int
	var err error
	if op.req.Interactive && op.req.WaitForWS {
		ret, err = op.runPTY()
	} else {
		ret, err = op.runPipes()
	}
	for _, c := range op.conns {
		_ = c.Close()
	}
	state := ""
	if op.cmd.ProcessState != nil {
		state = op.cmd.ProcessState.String()
	}
	log.Info("exec", "operation", op.id, "command", op.req.Command, "return", ret, "state", state, "err", err)
	op.finish(ret, err)
}

// startFailure is the exit code and message of a command that could not
// start (127 not found, 126 not runnable), as a shell gives.
func startFailure(err error) (int, string) {
	if errors.Is(err, fs.ErrNotExist) {
		return 127, fmt.Sprintf("exec: %v\r\n", err)
	}
	return 126, fmt.Sprintf("exec: %v\r\n", err)
}

// exitStatus returns a finished command's exit code: its status, or 128 +
// the signal that killed it.
func exitStatus(state *os.ProcessState) int {
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return state.ExitCode()
}

// runPipes runs a non-interactive command: stdin from fd 0 (or nothing),
// stdout and stderr to fds 1 and 2 (or discarded).
func (op *operation) runPipes() (int, error) {
	cmd := op.cmd
	cmd.SysProcAttr.Setpgid = true
	ws := op.req.WaitForWS
	var outputs sync.WaitGroup
	var closers []io.Closer
	if ws {
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return 0, fmt.Errorf("stdin pipe: %w", err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return 0, fmt.Errorf("stdout pipe: %w", err)
		}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			return 0, fmt.Errorf("stderr pipe: %w", err)
		}
		closers = append(closers, stdin)
		if err := cmd.Start(); err != nil {
			code, msg := startFailure(err)
			_ = op.conns[api.ExecFDStderr].WriteMessage(websocket.BinaryMessage, []byte(msg))
			sendEOF(op.conns[api.ExecFDStdout])
			sendEOF(op.conns[api.ExecFDStderr])
			return code, nil
		}
		go recvStream(op.conns[api.ExecFDStdin], stdin)
		outputs.Add(2)
		go func() { defer outputs.Done(); sendStream(op.conns[api.ExecFDStdout], stdout) }()
		go func() { defer outputs.Done(); sendStream(op.conns[api.ExecFDStderr], stderr) }()
	} else if err := cmd.Start(); err != nil {
		code, _ := startFailure(err)
		return code, nil
	}
	stopControl := op.serveControl(func(sig syscall.Signal) { _ = syscall.Kill(-cmd.Process.Pid, sig) })
	outputs.Wait()
	err := cmd.Wait()
	stopControl()
	for _, c := range closers {
		_ = c.Close()
	}
	var ee *osexec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return 0, fmt.Errorf("waiting for %q: %w", op.req.Command[0], err)
	}
	return exitStatus(cmd.ProcessState), nil
}

// runPTY runs an interactive command on a pseudo-terminal relayed to fd 0.
func (op *operation) runPTY() (int, error) {
	cmd := op.cmd
	conn := op.conns[api.ExecFDStdin]
	size := &pty.Winsize{Cols: uint16(op.req.Width), Rows: uint16(op.req.Height)}
	if size.Cols == 0 || size.Rows == 0 {
		size.Cols, size.Rows = 80, 24
	}
	// StartWithAttrs makes the terminal the session's controlling one.
	cmd.SysProcAttr.Setsid = true
	cmd.SysProcAttr.Setctty = true
	ptmx, err := pty.StartWithAttrs(cmd, size, cmd.SysProcAttr)
	if err != nil {
		code, msg := startFailure(err)
		_ = conn.WriteMessage(websocket.BinaryMessage, []byte(msg))
		sendEOF(conn)
		return code, nil
	}
	defer ptmx.Close()
	go func() {
		for {
			mt, data, err := conn.ReadMessage()
			if err != nil || mt == websocket.TextMessage && len(data) == 0 {
				return
			}
			if _, err := ptmx.Write(data); err != nil {
				return
			}
		}
	}()
	out := make(chan struct{})
	go func() { defer close(out); sendStream(conn, ptmx) }()
	stopControl := op.serveControl(func(sig syscall.Signal) { _ = syscall.Kill(-cmd.Process.Pid, sig) }, ptmx)
	err = cmd.Wait()
	stopControl()
	// The terminal gives its last output, then EIO once no process holds
	// it; a background process that keeps it open is not waited for long.
	t := time.NewTimer(drainWait)
	select {
	case <-out:
	case <-t.C:
		_ = ptmx.Close()
		<-out
	}
	t.Stop()
	var ee *osexec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return 0, fmt.Errorf("waiting for %q: %w", op.req.Command[0], err)
	}
	return exitStatus(cmd.ProcessState), nil
}

// serveControl reads the control websocket until stop is called: resizes
// (of tty, if given) and signals. The control socket closing before the
// command ends kills the command's process group (the client is gone).
func (op *operation) serveControl(signal func(syscall.Signal), tty ...*os.File) (stop func()) {
	conn := op.conns[api.ExecFDControl]
	if conn == nil {
		return func() {}
	}
	var mu sync.Mutex
	stopped := false
	go func() {
		for {
			_, data, err := conn.ReadMessage()
			if err != nil {
				mu.Lock()
				if !stopped {
					op.log.Warn("exec: the control websocket closed before the command ended: killing it", "operation", op.id, "err", err)
					signal(syscall.SIGKILL)
				}
				mu.Unlock()
				return
			}
			var m api.ExecControl
			if json.Unmarshal(data, &m) != nil {
				continue
			}
			// Under mu: once stop returned, the terminal may be closed
			// and the process reaped (its pid reused).
			mu.Lock()
			if stopped {
				mu.Unlock()
				continue
			}
			switch m.Command {
			case api.ExecControlResize:
				w, errW := strconv.Atoi(m.Args["width"])
				h, errH := strconv.Atoi(m.Args["height"])
				if errW == nil && errH == nil && w > 0 && h > 0 && w <= api.MaxTermSize && h <= api.MaxTermSize && len(tty) > 0 {
					_ = pty.Setsize(tty[0], &pty.Winsize{Cols: uint16(w), Rows: uint16(h)})
				}
			case api.ExecControlSignal:
				if m.Signal > 0 && m.Signal < 65 {
					signal(syscall.Signal(m.Signal))
				}
			}
			mu.Unlock()
		}
	}()
	return func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
	}
}

// sendStream writes r to conn as binary messages until EOF, then a close.
func sendStream(conn *websocket.Conn, r io.Reader) {
	buf := make([]byte, chunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if werr := conn.WriteMessage(websocket.BinaryMessage, buf[:n]); werr != nil {
				_, _ = io.Copy(io.Discard, r)
				return
			}
		}
		if err != nil {
			sendEOF(conn)
			return
		}
	}
}

// sendEOF ends a stream: an empty text message (LXD's end of stream), then
// a close.
func sendEOF(conn *websocket.Conn) {
	if conn == nil {
		return
	}
	_ = conn.WriteMessage(websocket.TextMessage, nil)
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
}

// recvStream writes conn's binary messages to w until an empty text
// message, a close or an error, then closes w (the command's stdin EOF).
func recvStream(conn *websocket.Conn, w io.WriteCloser) {
	defer w.Close()
	for {
		mt, data, err := conn.ReadMessage()
		if err != nil || mt == websocket.TextMessage {
			return
		}
		if _, err := w.Write(data); err != nil {
			return
		}
	}
}
