package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/agentmon"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/internal/wskeepalive"
)

// fakeAgent stands in for an agent's exec operation (one unit: the
// dashboard's relay is what is tested). Its fd 0 answers "exit\n" with
// "bye\n" and LXD's end of stream, after which the command has ended with
// code 7; its control socket hands each message to control.
type fakeAgent struct {
	srv     *httptest.Server
	control chan string
	ended   chan struct{}
	dataErr chan error // how the data socket's reading ended
}

func newFakeAgent(t *testing.T) *fakeAgent {
	a := &fakeAgent{control: make(chan string, 16), ended: make(chan struct{}), dataErr: make(chan error, 1)}
	up := websocket.Upgrader{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		for {
			mt, data, err := conn.ReadMessage()
			if err != nil {
				if r.URL.Query().Get("secret") == "agent-data" {
					a.dataErr <- err
				}
				return
			}
			if r.URL.Query().Get("secret") == "agent-control" {
				a.control <- string(data)
				continue
			}
			if mt == websocket.BinaryMessage && string(data) == "exit\n" {
				_ = conn.WriteMessage(websocket.BinaryMessage, []byte("bye\n"))
				_ = conn.WriteMessage(websocket.TextMessage, nil)
				close(a.ended)
				return
			}
		}
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *fakeAgent) Start(context.Context, api.ExecPost) (*api.Operation, error) {
	return nil, errors.New("not used")
}

func (a *fakeAgent) Wait(ctx context.Context, id string) (*api.Operation, error) {
	select {
	case <-a.ended:
		ret := 7
		return &api.Operation{ID: id, StatusCode: api.OperationSuccessCode, Metadata: api.ExecMetadata{Return: &ret}}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (a *fakeAgent) Websocket(ctx context.Context, _ string, secret string) (*websocket.Conn, error) {
	conn, _, err := websocket.DefaultDialer.DialContext(ctx, "ws"+strings.TrimPrefix(a.srv.URL, "http")+"/?secret="+secret, nil)
	return conn, err
}

// serveDashboard serves app on a loopback port until the test ends.
func serveDashboard(t *testing.T, cfg Config) (base string, d *Dashboard) {
	t.Helper()
	app, d := newTestApp(newFakeInstances(ready("web1", time.Minute, time.Second), ready("web2", time.Minute, time.Second)), newBusEvents(), cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- app.Listener(ln) }()
	t.Cleanup(func() {
		d.Close()
		if err := app.Shutdown(); err != nil {
			t.Errorf("shutting the dashboard down: %v", err)
		}
		<-served
	})
	return "127.0.0.1:" + fmt.Sprint(ln.Addr().(*net.TCPAddr).Port), d
}

// TestTerminalSocket opens a terminal's websockets as a browser does and
// as other pages and sessions try to: a cross-origin upgrade (the
// cross-site websocket hijack a cookie alone would allow), another port of
// the host, a request the browser marks cross-site, no session, another
// session, another instance's path and an unknown fd are each refused
// before anything reaches the agent; then the owner's page relays the
// control messages and the PTY's bytes, and the data socket ends with the
// exit code.
func TestTerminalSocket(t *testing.T) {
	sessions := newFakeSessions()
	owner, _, err := sessions.Redeem(context.Background(), sessions.issue())
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := sessions.Redeem(context.Background(), sessions.issue())
	if err != nil {
		t.Fatal(err)
	}
	host, d := serveDashboard(t, Config{Sessions: sessions})
	agent, term := startTestTerminal(t, d, owner)

	self := "http://" + host
	dial := func(path, session, origin string, extra http.Header) (*websocket.Conn, int, error) {
		h := http.Header{}
		for k, v := range extra {
			h[k] = v
		}
		if session != "" {
			h.Set("Cookie", sessionCookie+"="+session)
		}
		if origin != "" {
			h.Set("Origin", origin)
		}
		conn, res, err := websocket.DefaultDialer.Dial("ws://"+host+path, h)
		status := 0
		if res != nil {
			status = res.StatusCode
			res.Body.Close()
		}
		return conn, status, err
	}
	data := "/instances/web1/terminal/" + term.id + "/0"
	refused := []struct {
		name, path, session, origin string
		header                      http.Header
		status                      int
	}{
		{"cross-origin upgrade", data, owner, "http://evil.example", nil, http.StatusForbidden},
		{"another port of this host", data, owner, "http://127.0.0.1:1", nil, http.StatusForbidden},
		{"marked cross-site by the browser", data, owner, self, http.Header{"Sec-Fetch-Site": {"cross-site"}}, http.StatusForbidden},
		{"no session", data, "", self, nil, http.StatusUnauthorized},
		{"another session", data, other, self, nil, http.StatusNotFound},
		{"another instance's path", "/instances/web2/terminal/" + term.id + "/0", owner, self, nil, http.StatusNotFound},
		{"unknown terminal", "/instances/web1/terminal/" + randomToken() + "/0", owner, self, nil, http.StatusNotFound},
		{"unknown fd", "/instances/web1/terminal/" + term.id + "/1", owner, self, nil, http.StatusNotFound},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			conn, status, err := dial(tt.path, tt.session, tt.origin, tt.header)
			if err == nil {
				conn.Close()
				t.Fatalf("the upgrade was accepted, want %d", tt.status)
			}
			if status != tt.status {
				t.Fatalf("status %d (%v), want %d", status, err, tt.status)
			}
		})
	}
	term.mu.Lock()
	claimed := len(term.claimed)
	term.mu.Unlock()
	if claimed != 0 {
		t.Fatalf("refused upgrades claimed %d websockets of the terminal", claimed)
	}

	control, status, err := dial("/instances/web1/terminal/"+term.id+"/control", owner, self, nil)
	if err != nil {
		t.Fatalf("the owner's control socket: %d %v", status, err)
	}
	defer control.Close()
	pty, status, err := dial(data, owner, self, nil)
	if err != nil {
		t.Fatalf("the owner's data socket: %d %v", status, err)
	}
	defer pty.Close()
	if _, status, err := dial(data, owner, self, nil); err == nil || status != http.StatusConflict {
		t.Errorf("a second data socket: status %d (%v), want 409", status, err)
	}

	resize := `{"command":"window-resize","args":{"width":"120","height":"40"}}`
	if err := control.WriteMessage(websocket.TextMessage, []byte(resize)); err != nil {
		t.Fatal(err)
	}
	if got := <-agent.control; got != resize {
		t.Errorf("the agent's control socket got %q, want %q", got, resize)
	}
	if err := pty.WriteMessage(websocket.BinaryMessage, []byte("exit\n")); err != nil {
		t.Fatal(err)
	}
	mt, got, err := pty.ReadMessage()
	if err != nil || mt != websocket.BinaryMessage || string(got) != "bye\n" {
		t.Fatalf("the PTY's output: %d %q %v, want binary \"bye\\n\"", mt, got, err)
	}
	mt, got, err = pty.ReadMessage()
	if err != nil || mt != websocket.TextMessage {
		t.Fatalf("the end message: %d %q %v", mt, got, err)
	}
	var end terminalEnd
	if err := json.Unmarshal(got, &end); err != nil || end.Exit == nil || *end.Exit != 7 {
		t.Fatalf("the end message %q (%v), want exit 7", got, err)
	}
	if _, _, err := pty.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Errorf("after the exit code: %v, want a normal close", err)
	}
	<-term.done
	if _, ok := d.terms.get(owner, "web1", term.id); ok {
		t.Error("an ended terminal is still kept")
	}
}

// TestTerminalEndsWithSession signs the session out while its terminal is
// open: at the next heartbeat the dashboard closes the terminal's
// websockets (the agent then ends the shell), as the live stream ends.
func TestTerminalEndsWithSession(t *testing.T) {
	sessions := newFakeSessions()
	sid, _, err := sessions.Redeem(context.Background(), sessions.issue())
	if err != nil {
		t.Fatal(err)
	}
	host, d := serveDashboard(t, Config{Sessions: sessions, Heartbeat: 20 * time.Millisecond})
	agent, term := startTestTerminal(t, d, sid)
	h := http.Header{"Cookie": {sessionCookie + "=" + sid}, "Origin": {"http://" + host}}
	pty, res, err := websocket.DefaultDialer.Dial("ws://"+host+"/instances/web1/terminal/"+term.id+"/0", h)
	if err != nil {
		t.Fatalf("the data socket: %v", err)
	}
	res.Body.Close()
	defer pty.Close()
	if err := sessions.Revoke(context.Background(), sid); err != nil {
		t.Fatal(err)
	}
	if _, _, err := pty.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Fatalf("after the session ended the data socket read %v, want a normal close", err)
	}
	close(agent.ended) // the agent's command ends: followTerminal returns
	<-term.done
}

// TestTerminalDeadBrowser: with short pings, a browser that stops
// answering them (its laptop asleep, a NAT that dropped the connection)
// is closed, and the agent's end of the shell gets a normal close (the
// agent ends the shell). Before the relay pinged, the session stayed open
// for good. A live idle browser is kept: TestKeeper (internal/wskeepalive)
// and TestRelayDeadPeer (transport/adminapi).
func TestTerminalDeadBrowser(t *testing.T) {
	old := terminalKeepalive
	terminalKeepalive = wskeepalive.Config{Interval: 20 * time.Millisecond, Timeout: 100 * time.Millisecond}
	t.Cleanup(func() { terminalKeepalive = old })
	sessions := newFakeSessions()
	sid, _, err := sessions.Redeem(context.Background(), sessions.issue())
	if err != nil {
		t.Fatal(err)
	}
	host, d := serveDashboard(t, Config{Sessions: sessions, Heartbeat: time.Hour})
	agent, term := startTestTerminal(t, d, sid)
	h := http.Header{"Cookie": {sessionCookie + "=" + sid}, "Origin": {"http://" + host}}
	pty, res, err := websocket.DefaultDialer.Dial("ws://"+host+"/instances/web1/terminal/"+term.id+"/0", h)
	if err != nil {
		t.Fatalf("the data socket: %v", err)
	}
	res.Body.Close()
	defer pty.Close()
	var pings atomic.Int32
	pty.SetPingHandler(func(s string) error {
		if pings.Add(1) > 3 {
			return nil // asleep from now on
		}
		return pty.WriteControl(websocket.PongMessage, []byte(s), time.Now().Add(time.Second))
	})
	go func() {
		for {
			if _, _, err := pty.ReadMessage(); err != nil {
				return
			}
		}
	}()
	select {
	case err := <-agent.dataErr:
		if !websocket.IsCloseError(err, websocket.CloseNormalClosure) || pings.Load() < 3 {
			t.Fatalf("the agent's data socket ended with %v after %d pings, want a normal close once the browser went silent", err, pings.Load())
		}
	case <-time.After(time.Minute):
		t.Fatalf("the dashboard kept a browser that stopped answering pings (%d pings)", pings.Load())
	}
	close(agent.ended)
	<-term.done
}

// fakeExecer is an Execer whose agent is never connected.
type fakeExecer struct{ err error }

func (f fakeExecer) Exec(string) (*agentmon.ExecLink, error) { return nil, f.err }

// TestOpenTerminalRefused posts the terminal's open request in the ways it
// cannot succeed: each answer is a readable message with its status, and
// nothing is kept.
func TestOpenTerminalRefused(t *testing.T) {
	notConnected := fmt.Errorf("the agent of instance %q is not connected (agent state lost): %w", "web1", errdefs.ErrConflict)
	tests := []struct {
		name   string
		exec   Execer
		path   string
		form   url.Values
		token  bool
		status int
		want   string
	}{
		{"no CSRF token", fakeExecer{notConnected}, "/instances/web1/terminal", nil, false, http.StatusForbidden, "security token"},
		{"agent not connected", fakeExecer{notConnected}, "/instances/web1/terminal", nil, true, http.StatusConflict, "is not connected"},
		{"unknown instance", fakeExecer{notConnected}, "/instances/nope/terminal", nil, true, http.StatusNotFound, "nope"},
		{"width out of range", fakeExecer{notConnected}, "/instances/web1/terminal", url.Values{"cols": {"0"}}, true, http.StatusBadRequest, "invalid terminal cols"},
		{"height not a number", fakeExecer{notConnected}, "/instances/web1/terminal", url.Values{"rows": {"tall"}}, true, http.StatusBadRequest, "invalid terminal rows"},
		{"no exec on this dashboard", nil, "/instances/web1/terminal", nil, true, http.StatusNotImplemented, "opens no terminals"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			app, d := newTestApp(newFakeInstances(ready("web1", time.Minute, time.Second)), newBusEvents(), Config{Exec: tt.exec})
			defer d.Close()
			s := openSession(t, app)
			form := url.Values{}
			for k, v := range tt.form {
				form[k] = v
			}
			if tt.token {
				form.Set("_csrf", s.token)
			}
			res, body, _ := do(t, app, post(tt.path, form, s, nil))
			if res.StatusCode != tt.status || !strings.Contains(body, tt.want) {
				t.Fatalf("%d %q, want %d with %q", res.StatusCode, body, tt.status, tt.want)
			}
			if n := len(d.terms.byID); n != 0 {
				t.Errorf("%d terminals kept after a refusal", n)
			}
		})
	}
}

// startTestTerminal opens a terminal of instance web1 for session on the
// dashboard d, relayed to a fake agent, as openTerminal would.
func startTestTerminal(t *testing.T, d *Dashboard, session string) (*fakeAgent, *terminal) {
	t.Helper()
	agent := newFakeAgent(t)
	term := &terminal{
		id: randomToken(), session: session, instance: "web1", who: "session/test", link: agent, agentOp: "op1",
		secrets: map[string]string{api.ExecFDStdin: "agent-data", api.ExecFDControl: "agent-control"},
		claimed: map[string]bool{}, done: make(chan struct{}), stop: make(chan struct{}),
	}
	d.terms.add(term)
	go d.followTerminal(term)
	return agent, term
}
