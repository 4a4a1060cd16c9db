package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gofiber/contrib/websocket"
	"github.com/gofiber/fiber/v2"
	gorilla "github.com/gorilla/websocket"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/agentmon"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/internal/wskeepalive"
	"github.com/guestlink/guestlink/web/components"
)

// Execer reaches the agents of running instances for the terminal of the
// instance page (core/agentmon.Service). Exec fails with
// errdefs.ErrConflict, without dialing, unless the instance's agent is
// CONNECTED.
type Execer interface {
	Exec(uuid string) (*agentmon.ExecLink, error)
}

var _ Execer = (*agentmon.Service)(nil)

// execLink is what a terminal uses of an agent's exec routes
// (*agentmon.ExecLink): start the command, wait for its end, connect its
// websockets.
type execLink interface {
	Start(ctx context.Context, req api.ExecPost) (*api.Operation, error)
	Wait(ctx context.Context, id string) (*api.Operation, error)
	Websocket(ctx context.Context, id, secret string) (*gorilla.Conn, error)
}

var _ execLink = (*agentmon.ExecLink)(nil)

// TerminalCommand is what the dashboard's terminal runs in the guest: a
// login bash where the guest has one, else a login /bin/sh.
var TerminalCommand = []string{"/bin/sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec /bin/sh -l"}

const (
	// termDialTimeout bounds starting the command and connecting one of
	// the agent's websockets.
	termDialTimeout = 30 * time.Second
	// termExitWait bounds how long the terminal's data socket waits for
	// the command's exit code once the agent's output has ended.
	termExitWait = 30 * time.Second
	// termDataLimit and termControlLimit bound one message from the
	// browser: a paste, a control message.
	termDataLimit    = 1 << 20
	termControlLimit = 4 << 10
	// termSocketKey is the Locals key of a claimed terminal websocket.
	termSocketKey = "guestlink.terminal"
)

// terminal is one interactive exec opened from the instance page. The
// browser connects two websockets to it, LXD's fds "0" (the PTY's bytes
// both ways) and "control" (window-resize messages), which the dashboard
// relays to the agent operation's; the data socket ends with the exit
// code.
type terminal struct {
	id       string
	session  string // the dashboard session that opened it ("" without Sessions)
	instance string
	who      string
	link     execLink
	agentOp  string            // the agent's operation id
	secrets  map[string]string // the agent's websocket secrets by fd

	mu      sync.Mutex
	claimed map[string]bool
	done    chan struct{} // closed once the command ended (ret or err)
	ret     int
	err     error

	// stop is closed when the session that opened the terminal has
	// ended: its websockets close, and the agent ends the shell.
	stop     chan struct{}
	stopOnce sync.Once
}

// end closes the terminal's websockets (once).
func (t *terminal) end() { t.stopOnce.Do(func() { close(t.stop) }) }

// claim reserves fd for a connecting websocket: each fd connects once.
func (t *terminal) claim(fd string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.secrets[fd]; !ok {
		return fmt.Errorf("terminal %s has no websocket %q (0 or control): %w", t.id, fd, errdefs.ErrNotFound)
	}
	select {
	case <-t.done:
		return fmt.Errorf("terminal %s has ended: %w", t.id, errdefs.ErrConflict)
	default:
	}
	if t.claimed[fd] {
		return fmt.Errorf("websocket %s of terminal %s is already connected: %w", fd, t.id, errdefs.ErrConflict)
	}
	t.claimed[fd] = true
	return nil
}

// terminals keeps the open terminals by id.
type terminals struct {
	mu   sync.Mutex
	byID map[string]*terminal
}

func (ts *terminals) add(t *terminal) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.byID == nil {
		ts.byID = map[string]*terminal{}
	}
	ts.byID[t.id] = t
}

func (ts *terminals) remove(id string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	delete(ts.byID, id)
}

// get returns terminal id of instance if session opened it.
func (ts *terminals) get(session, instance, id string) (*terminal, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t, ok := ts.byID[id]
	if !ok || t.session != session || t.instance != instance {
		return nil, false
	}
	return t, true
}

// termSize reads a terminal dimension from the form: 1 to
// api.MaxTermSize, def when absent.
func termSize(c *fiber.Ctx, field string, def int) (int, error) {
	v := c.FormValue(field)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > api.MaxTermSize {
		return 0, fmt.Errorf("invalid terminal %s %q: a number from 1 to %d: %w", field, v, api.MaxTermSize, errdefs.ErrInvalid)
	}
	return n, nil
}

// terminalView is the terminal panel of the instance page: the open
// button while the instance's agent is connected.
func (d *Dashboard) terminalView(inst *api.Instance) components.TerminalView {
	v := components.TerminalView{Shown: d.cfg.Exec != nil, Open: "/instances/" + inst.Name + "/terminal"}
	switch {
	case inst.Agent.State == api.AgentConnected:
		v.Available = true
	case inst.Status != "Running" && inst.Status != "Ready":
		v.Reason = "The instance is not running: start it, then reload this page to open a terminal."
	default:
		v.Reason = "The guest's agent is not connected yet: a terminal opens once it is (reload this page then)."
	}
	return v
}

// terminalOpened is the answer of POST /instances/{name}/terminal: where
// the page connects the terminal's two websockets.
type terminalOpened struct {
	ID      string   `json:"id"`
	Data    string   `json:"data"`    // the websocket of fd 0
	Control string   `json:"control"` // the websocket of fd control
	Command []string `json:"command"`
}

// terminalEnd is the last message of a terminal's data websocket (text,
// JSON): the command's exit code, or why it has none.
type terminalEnd struct {
	Exit  *int   `json:"exit,omitempty"`
	Error string `json:"error,omitempty"`
}

// openTerminal answers POST /instances/{name}/terminal (session and CSRF
// token, as every dashboard POST): it starts TerminalCommand on a
// pseudo-terminal of cols x rows in the guest, through its agent, and
// answers 201 with the terminal's id and websocket paths. A refusal is a
// plain-text message with its status (409 when the agent is not connected,
// 403 when exec is switched off in the guest).
func (d *Dashboard) openTerminal(c *fiber.Ctx) error {
	if d.cfg.Exec == nil {
		return d.fail(c, fmt.Errorf("this dashboard opens no terminals: %w", errdefs.ErrNotSupported))
	}
	name := c.Params("name")
	cols, err := termSize(c, "cols", 80)
	if err != nil {
		return d.fail(c, err)
	}
	rows, err := termSize(c, "rows", 24)
	if err != nil {
		return d.fail(c, err)
	}
	inst, err := d.cfg.Instances.Get(c.UserContext(), name)
	if err != nil {
		return d.fail(c, err)
	}
	link, err := d.cfg.Exec.Exec(inst.UUID)
	if err != nil {
		return d.fail(c, fmt.Errorf("opening a terminal in instance %q: %w", name, err))
	}
	req := api.ExecPost{
		Command:     TerminalCommand,
		Environment: map[string]string{"TERM": "xterm-256color"},
		WaitForWS:   true, Interactive: true, Width: cols, Height: rows,
	}
	if err := req.Validate(); err != nil {
		return d.fail(c, fmt.Errorf("opening a terminal in instance %q: %w: %w", name, err, errdefs.ErrInvalid))
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), termDialTimeout)
	defer cancel()
	op, err := link.Start(ctx, req)
	if err != nil {
		return d.fail(c, fmt.Errorf("opening a terminal in instance %q: %w", name, err))
	}
	by := requestor(c)
	sid, _ := c.Locals(localSession).(string)
	t := &terminal{
		id: randomToken(), session: sid, instance: name, who: by.Describe(),
		link: link, agentOp: op.ID, secrets: op.Metadata.FDs,
		claimed: map[string]bool{}, done: make(chan struct{}), stop: make(chan struct{}),
	}
	d.terms.add(t)
	d.log.Info("terminal opened", "identity", t.who, "instance", name, "command", req.Command,
		"size", fmt.Sprintf("%dx%d", cols, rows), "operation", op.ID)
	go d.followTerminal(t)
	base := "/instances/" + name + "/terminal/" + t.id + "/"
	c.Set("Cache-Control", "no-store")
	return c.Status(http.StatusCreated).JSON(terminalOpened{ID: t.id, Data: base + api.ExecFDStdin, Control: base + api.ExecFDControl, Command: req.Command})
}

// followTerminal waits for the command to end, records its exit code and
// audits it; the terminal is then forgotten. It ends with the dashboard
// (Close). Meanwhile it checks the session at every heartbeat, as the live
// stream does: once the session is signed out, revoked or expired, the
// terminal is closed (and the agent ends the shell).
func (d *Dashboard) followTerminal(t *terminal) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		tick := time.NewTicker(d.cfg.Heartbeat)
		defer tick.Stop()
		for {
			select {
			case <-d.done:
				cancel()
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				if !d.sessionLive(t.session) {
					d.log.Info("terminal closed: its session ended", "identity", t.who, "instance", t.instance, "operation", t.agentOp)
					t.end()
					return
				}
			}
		}
	}()
	res, err := t.link.Wait(ctx, t.agentOp)
	switch {
	case err != nil:
		err = fmt.Errorf("waiting for the terminal's shell in instance %q: %w", t.instance, err)
	case res.StatusCode == api.OperationFailureCode:
		err = fmt.Errorf("terminal in instance %q: %s", t.instance, res.Err)
	case res.Metadata.Return == nil:
		err = fmt.Errorf("terminal in instance %q: the agent gave no exit code", t.instance)
	}
	t.mu.Lock()
	if err == nil {
		t.ret = *res.Metadata.Return
	}
	t.err = err
	t.mu.Unlock()
	close(t.done)
	d.terms.remove(t.id)
	if err != nil {
		d.log.Warn("terminal failed", "identity", t.who, "instance", t.instance, "command", TerminalCommand, "operation", t.agentOp, "err", err)
		return
	}
	d.log.Info("terminal ended", "identity", t.who, "instance", t.instance, "command", TerminalCommand, "exit_code", t.ret, "operation", t.agentOp)
}

// claimedTerminal is what terminalUpgrade hands the websocket handler.
type claimedTerminal struct {
	t  *terminal
	fd string
}

// terminalUpgrade checks a terminal websocket's upgrade request (GET
// /instances/{name}/terminal/{id}/{fd}) before it is accepted: the page's
// own origin (a page of another origin, even another port of this host,
// cannot open it with the visitor's cookie), a terminal this session
// opened on this instance, and an fd not yet connected.
func (d *Dashboard) terminalUpgrade(c *fiber.Ctx) error {
	if err := sameOrigin(c); err != nil {
		return forbidden(c, "terminal: "+err.Error())
	}
	if !websocket.IsWebSocketUpgrade(c) {
		return d.fail(c, fmt.Errorf("%s is a websocket: send an upgrade request: %w", c.Path(), errdefs.ErrInvalid))
	}
	sid, _ := c.Locals(localSession).(string)
	t, ok := d.terms.get(sid, c.Params("name"), c.Params("id"))
	if !ok {
		return d.fail(c, fmt.Errorf("no such terminal: it ended, or another session opened it: %w", errdefs.ErrNotFound))
	}
	fd := c.Params("fd")
	if err := t.claim(fd); err != nil {
		return d.fail(c, err)
	}
	c.Locals(termSocketKey, claimedTerminal{t: t, fd: fd})
	return c.Next()
}

// terminalSocket returns the handler of a terminal's websockets: each is
// relayed to the agent operation's websocket of the same fd. The data
// socket (fd 0) then ends with a terminalEnd message.
func (d *Dashboard) terminalSocket() fiber.Handler {
	return websocket.New(func(conn *websocket.Conn) {
		ct, ok := conn.Locals(termSocketKey).(claimedTerminal)
		if !ok {
			return
		}
		d.streams.Add(1)
		defer d.streams.Add(-1)
		ctx, cancel := context.WithTimeout(context.Background(), termDialTimeout)
		agent, err := ct.t.link.Websocket(ctx, ct.t.agentOp, ct.t.secrets[ct.fd])
		cancel()
		if err != nil {
			d.log.Warn("terminal: connecting the agent's websocket", "instance", ct.t.instance, "operation", ct.t.agentOp, "fd", ct.fd, "err", err)
			closeSocket(conn, websocket.CloseInternalServerErr, "the agent's websocket could not be reached")
			return
		}
		if ct.fd == api.ExecFDControl {
			conn.SetReadLimit(termControlLimit)
			relayTerminal(conn, agent, d.done, ct.t.stop, nil)
			return
		}
		conn.SetReadLimit(termDataLimit)
		relayTerminal(conn, agent, d.done, ct.t.stop, func() {
			end := terminalEnd{Error: "the terminal's exit code did not come in time"}
			t := time.NewTimer(termExitWait)
			defer t.Stop()
			select {
			case <-ct.t.done:
				ct.t.mu.Lock()
				if ct.t.err != nil {
					end.Error = d.errorText("terminal "+ct.t.instance, ct.t.err)
				} else {
					ret := ct.t.ret
					end = terminalEnd{Exit: &ret}
				}
				ct.t.mu.Unlock()
			case <-t.C:
			case <-d.done:
				end.Error = "the dashboard is shutting down"
			}
			b, _ := json.Marshal(end)
			_ = conn.WriteMessage(websocket.TextMessage, b)
		})
	}, websocket.Config{HandshakeTimeout: 10 * time.Second, ReadBufferSize: 32 << 10, WriteBufferSize: 32 << 10})
}

// socket is the part of a websocket connection the terminal relay uses
// (gorilla's, the agent side, and fasthttp's, the browser side).
type socket = wskeepalive.Conn

// terminalKeepalive is the timing of the terminal relay's pings (zero: the
// defaults; tests shorten it).
var terminalKeepalive wskeepalive.Config

// relayTerminal copies messages between the browser's websocket and the
// agent's until either ends or closing or stop is closed. The agent's end of
// stream (LXD's empty text message) ends its side; when the agent's side
// ended first, last (if any) writes the browser its final message. Then
// both are closed, each told with a close frame. Both of the dashboard's
// ends are pinged (internal/wskeepalive): an idle shell stays open behind
// a proxy or a NAT, and a peer that stops answering pings is closed, which
// ends the relay like any other end.
func relayTerminal(browserConn, agentConn socket, closing, stop <-chan struct{}, last func()) {
	browser := wskeepalive.Keep(browserConn, terminalKeepalive)
	agent := wskeepalive.Keep(agentConn, terminalKeepalive)
	fromAgent := make(chan struct{})
	fromBrowser := make(chan struct{})
	go func() {
		defer close(fromBrowser)
		for {
			mt, data, err := browser.ReadMessage()
			if err != nil || agent.WriteMessage(mt, data) != nil {
				return
			}
		}
	}()
	go func() {
		defer close(fromAgent)
		for {
			mt, data, err := agent.ReadMessage()
			if err != nil || mt == websocket.TextMessage && len(data) == 0 {
				return
			}
			if browser.WriteMessage(mt, data) != nil {
				return
			}
		}
	}()
	bye := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
	select {
	case <-fromAgent:
		if last != nil {
			last()
		}
	case <-fromBrowser:
	case <-closing:
	case <-stop:
	}
	deadline := time.Now().Add(time.Second)
	_ = browser.WriteControl(websocket.CloseMessage, bye, deadline)
	_ = agent.WriteControl(websocket.CloseMessage, bye, deadline)
	_ = browser.Close()
	_ = agent.Close()
	<-fromAgent
	<-fromBrowser
}

// closeSocket ends a websocket with a close frame of code and msg.
func closeSocket(conn *websocket.Conn, code int, msg string) {
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, msg), time.Now().Add(time.Second))
}
