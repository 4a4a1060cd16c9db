package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/guestlink/guestlink/agent/agenttest"
	"github.com/guestlink/guestlink/agent/devlxdclient"
	"github.com/guestlink/guestlink/internal/leakcheck"
	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/link/advert"
	"github.com/guestlink/guestlink/link/devlxdapi"
	"github.com/guestlink/guestlink/link/ringproto"
)

var agentBin string

func TestMain(m *testing.M) {
	var err error
	agentBin, err = agenttest.BuildAgent()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		// No test may leave a goroutine behind (the agents run as processes;
		// these are the tests' own daemons and clients).
		if err := goleak.Find(leakcheck.Known...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const wait = 20 * time.Second

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

// waitCond waits until cond holds or the generous timeout passes.
func waitCond(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, what, wait, cond)
}

// advertise sends the daemon's advertisement until the agent's link port is
// up and it is accepted.
func advertise(t testing.TB, d *agenttest.Daemon) {
	t.Helper()
	var last string
	waitCond(t, "advertisement accepted", func() bool {
		code, body, err := d.Advertise(ctxT(t))
		last = fmt.Sprintf("%d %s %v", code, body, err)
		return err == nil && code == http.StatusOK
	})
	_ = last
}

type answer struct {
	status int
	ctype  string
	body   string
}

func guestDo(t testing.TB, c *http.Client, method, path, body string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), method, "http://lxd"+path, strings.NewReader(body))
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading %s %s: %v", method, path, err)
	}
	return answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}
}

func TestRingWordsAndAdvertisement(t *testing.T) {
	g := agenttest.NewGuest(t)
	ring := agenttest.OpenRing(t, g, ringproto.PortCurrent)
	d := agenttest.StartDaemon(t, g.Certs, g.UDS, 4100)
	p := agenttest.StartAgent(t, agentBin, g, "--heartbeat", "200ms")

	i := ring.WaitFor(t, 0, ringproto.Started, wait)
	i = ring.WaitFor(t, i, ringproto.Started, wait) // heartbeat repeats the word
	if _, err := os.Stat(g.Socket()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("devlxd socket exists before any advertisement: %v", err)
	}

	advertise(t, d)
	i = ring.WaitFor(t, i, ringproto.Connected, wait)
	i = ring.WaitFor(t, i, ringproto.Connected, wait) // heartbeat now repeats CONNECTED
	waitCond(t, "devlxd socket", func() bool { _, err := os.Stat(g.Socket()); return err == nil })
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{{filepath.Dir(g.Socket()), 0o755}, {g.Socket(), 0o600}} {
		fi, err := os.Stat(c.path)
		if err != nil || fi.Mode().Perm() != c.mode {
			t.Fatalf("%s mode = %v (%v), want %v", c.path, fi.Mode().Perm(), err, c.mode)
		}
	}

	// The agent's own GET /1.0 on the link port.
	code, body, err := d.CallAgent(ctxT(t), http.MethodGet, "/1.0", nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /1.0 on agent = %d %s %v", code, body, err)
	}
	env, err := devlxdapi.ParseResponse(body)
	if err != nil {
		t.Fatalf("agent info envelope: %v", err)
	}
	var info devlxdapi.AgentInfo
	if err := json.Unmarshal(env.Metadata, &info); err != nil || info.State != "CONNECTED" || !info.Devlxd || info.BootID != "boot-1" {
		t.Fatalf("agent info = %+v (%v)", info, err)
	}

	exited, err := p.Stop(wait)
	if !exited || err != nil {
		t.Fatalf("agent stop: exited=%v err=%v", exited, err)
	}
	ring.WaitFor(t, i, ringproto.Stopped, wait)
	words := ring.Words()
	if words[len(words)-1] != ringproto.Stopped {
		t.Fatalf("last ring word = %q, want STOPPED (all: %q)", words[len(words)-1], words)
	}
	if _, err := os.Stat(g.Socket()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("devlxd socket left after exit: %v", err)
	}
}

func TestLegacyPortFallback(t *testing.T) {
	g := agenttest.NewGuest(t)
	legacy := agenttest.OpenRing(t, g, ringproto.PortLegacy)
	agenttest.StartAgent(t, agentBin, g, "--heartbeat", "200ms")
	legacy.WaitFor(t, 0, ringproto.Started, wait)
}

func TestLinkPortRejectsWrongClientCert(t *testing.T) {
	g := agenttest.NewGuest(t)
	d := agenttest.StartDaemon(t, g.Certs, g.UDS, 4101)
	agenttest.StartAgent(t, agentBin, g)
	advertise(t, d) // the right certificate works

	tests := []struct {
		name string
		cert agenttest.KeyPair
	}{
		{"stranger", agenttest.NewKeyPair(t, "stranger")},
		{"agent's own cert", g.Certs.Agent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(ctxT(t), http.MethodPut, "https://agent/1.0", strings.NewReader(string(d.Advertisement().Marshal())))
			resp, err := d.AgentClient(tt.cert).Do(req)
			if err == nil {
				resp.Body.Close()
				t.Fatalf("PUT /1.0 with %s certificate answered %d, want a TLS failure", tt.name, resp.StatusCode)
			}
		})
	}
}

func TestAdvertisementBadBodies(t *testing.T) {
	g := agenttest.NewGuest(t)
	d := agenttest.StartDaemon(t, g.Certs, g.UDS, 4102)
	agenttest.StartAgent(t, agentBin, g)
	advertise(t, d)
	tests := []struct {
		name, method, path, body string
		code                     int
		msg                      string
	}{
		{"not json", http.MethodPut, "/1.0", "hello", 400, "Invalid request body: invalid advertisement"},
		{"unknown field", http.MethodPut, "/1.0", `{"cid":2,"port":1,"certificate":"x","devlxd":true,"x":1}`, 400, "unknown field"},
		{"bad port", http.MethodPut, "/1.0", `{"cid":2,"port":0,"certificate":"x","devlxd":true}`, 400, "port 0 outside 1..65535"},
		{"too big", http.MethodPut, "/1.0", strings.Repeat(" ", 70<<10), 413, "Request body too large"},
		{"event bad type", http.MethodPost, "/1.0/events", `{"type":"lifecycle","timestamp":"2026-01-01T00:00:00Z","metadata":{}}`, 400, `unknown event type "lifecycle"`},
		{"event bad time", http.MethodPost, "/1.0/events", `{"type":"config","timestamp":"yesterday","metadata":{}}`, 400, "timestamp"},
		{"event metadata not object", http.MethodPost, "/1.0/events", `{"type":"config","timestamp":"2026-01-01T00:00:00Z","metadata":[1]}`, 400, "metadata must be a JSON object"},
		{"unknown path", http.MethodGet, "/2.0", "", 404, "Not Found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body, err := d.CallAgent(ctxT(t), tt.method, tt.path, []byte(tt.body))
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			env, perr := devlxdapi.ParseResponse(body)
			if code != tt.code || perr != nil || env.ErrorCode != tt.code || !strings.Contains(env.Error, tt.msg) {
				t.Fatalf("%s %s = %d %s, want %d containing %q", tt.method, tt.path, code, body, tt.code, tt.msg)
			}
		})
	}
}

func TestRedeclareAfterDaemonRestart(t *testing.T) {
	g := agenttest.NewGuest(t)
	ring := agenttest.OpenRing(t, g, ringproto.PortCurrent)
	d1 := agenttest.StartDaemon(t, g.Certs, g.UDS, 4106)
	agenttest.StartAgent(t, agentBin, g, "--heartbeat", "200ms")
	advertise(t, d1)
	i := ring.WaitFor(t, 0, ringproto.Connected, wait)
	waitCond(t, "devlxd socket", func() bool { _, err := os.Stat(g.Socket()); return err == nil })
	c := devlxdclient.New(g.Socket())
	decl := devlxdapi.StatePut{State: "Ready", Reason: "ChecksPassed", Message: "db and cache up"}
	if err := devlxdclient.DeclareWith(ctxT(t), c, decl); err != nil {
		t.Fatalf("declare Ready: %v", err)
	}

	// The same daemon re-advertising is not a new daemon: no repeat.
	advertise(t, d1)
	// The daemon dies: the agent goes back to STARTED and the guest gets
	// LXD's agent's 500s (not after a long wait: the link is refused).
	d1.Close()
	i = ring.WaitFor(t, i, ringproto.Started, wait)
	start := time.Now()
	if got := guestDo(t, c, "GET", "/1.0", ""); got.status != http.StatusInternalServerError || !strings.HasPrefix(got.body, "Failed connecting to devLXD over vsock: ") {
		t.Fatalf("GET /1.0 with daemon down = %#v, want 500", got)
	}
	t.Logf("500 answered in %s", time.Since(start))

	// A restarted daemon (new port) advertises: the agent re-declares Ready.
	d2 := agenttest.StartDaemon(t, g.Certs, g.UDS, 4107)
	advertise(t, d2)
	ring.WaitFor(t, i, ringproto.Connected, wait)
	// The re-declaration is sent before the PUT is answered, with the
	// guest's reason and message.
	if got := d2.DeclarationsSeen(); !reflect.DeepEqual(got, []devlxdapi.StatePut{decl}) {
		t.Fatalf("new daemon saw %+v, want %+v re-declared", got, decl)
	}
	if got := d1.PatchesSeen(); !reflect.DeepEqual(got, []string{"Ready"}) {
		t.Fatalf("first daemon saw %q, want exactly one Ready", got)
	}
	if got := guestDo(t, c, "GET", "/1.0/config/user.foo", ""); got.status != 200 || got.body != "bar" {
		t.Fatalf("GET via new daemon = %#v", got)
	}
}

// TestDeclarationInAnswer: a daemon that sends advert.DeclarationHeader
// (it asks because it lacks the guest's state: it started since, or its
// record of it failed) gets the guest's last declaration (state, reason,
// message) back in the answer to its PUT /1.0 and no PATCH /1.0, each time
// it asks, even the daemon the guest declared to; a daemon that does not
// send the header (an older one) gets the PATCH, as before.
func TestDeclarationInAnswer(t *testing.T) {
	g := agenttest.NewGuest(t)
	ring := agenttest.OpenRing(t, g, ringproto.PortCurrent)
	d1 := agenttest.StartDaemon(t, g.Certs, g.UDS, 4113)
	agenttest.StartAgent(t, agentBin, g, "--heartbeat", "200ms")
	advertise(t, d1)
	i := ring.WaitFor(t, 0, ringproto.Connected, wait)
	waitCond(t, "devlxd socket", func() bool { _, err := os.Stat(g.Socket()); return err == nil })
	decl := devlxdapi.StatePut{State: "Ready", Reason: "ChecksPassed", Message: "db up, cache warm"}
	if err := devlxdclient.DeclareWith(ctxT(t), devlxdclient.New(g.Socket()), decl); err != nil {
		t.Fatalf("declare: %v", err)
	}
	answerOf := func(d *agenttest.Daemon) *devlxdapi.StatePut {
		t.Helper()
		var body []byte
		waitCond(t, "advertisement accepted", func() bool {
			code, b, err := d.AdvertiseInAnswer(ctxT(t))
			body = b
			return err == nil && code == http.StatusOK
		})
		var env struct {
			Metadata *advert.Answer `json:"metadata"`
		}
		if err := json.Unmarshal(body, &env); err != nil {
			t.Fatalf("answer %s: %v", body, err)
		}
		if env.Metadata == nil {
			return nil
		}
		return env.Metadata.Declaration
	}
	// Asked without the header, the daemon declared to gets nothing; with
	// it (its record failed, say), the declaration.
	advertise(t, d1)
	if got := d1.PatchesSeen(); !reflect.DeepEqual(got, []string{"Ready"}) {
		t.Fatalf("the daemon declared to saw %q, want the one Ready", got)
	}
	if got := answerOf(d1); got == nil || *got != decl {
		t.Fatalf("the daemon declared to, asking, got %+v back, want %+v", got, decl)
	}
	d1.Close()
	i = ring.WaitFor(t, i, ringproto.Started, wait)

	d2 := agenttest.StartDaemon(t, g.Certs, g.UDS, 4114)
	if got := answerOf(d2); got == nil || *got != decl {
		t.Fatalf("new daemon's answer carried %+v, want %+v", got, decl)
	}
	i = ring.WaitFor(t, i, ringproto.Connected, wait)
	// Its record failed, say: it asks again and gets it again (a daemon
	// that has the state does not ask: core/agentmon asksDeclaration).
	if got := answerOf(d2); got == nil || *got != decl {
		t.Fatalf("the new daemon asking again got %+v, want %+v", got, decl)
	}
	if got := d2.PatchesSeen(); len(got) != 0 {
		t.Fatalf("the daemon that took the declaration in the answer also got PATCHes %q", got)
	}
	d2.Close()
	ring.WaitFor(t, i, ringproto.Started, wait)

	// A daemon without the header gets the PATCH before the answer.
	d3 := agenttest.StartDaemon(t, g.Certs, g.UDS, 4115)
	advertise(t, d3)
	if got := d3.DeclarationsSeen(); !reflect.DeepEqual(got, []devlxdapi.StatePut{decl}) {
		t.Fatalf("a daemon without the header saw %+v, want %+v PATCHed", got, decl)
	}
}

func TestAgentRestartSameDaemonNoRedeclare(t *testing.T) {
	g := agenttest.NewGuest(t)
	d := agenttest.StartDaemon(t, g.Certs, g.UDS, 4110)
	p := agenttest.StartAgent(t, agentBin, g)
	advertise(t, d)
	waitCond(t, "devlxd socket", func() bool { _, err := os.Stat(g.Socket()); return err == nil })
	if err := devlxdclient.Declare(ctxT(t), devlxdclient.New(g.Socket()), "Ready"); err != nil {
		t.Fatalf("declare Ready: %v", err)
	}
	if exited, err := p.Stop(wait); !exited || err != nil {
		t.Fatalf("stop: exited=%v err=%v", exited, err)
	}
	// Without agent.conf the restarted agent brings the socket up from the
	// advertisement it validated earlier in this boot.
	agenttest.StartAgent(t, agentBin, g)
	waitCond(t, "devlxd socket after restart", func() bool { _, err := os.Stat(g.Socket()); return err == nil })
	advertise(t, d)
	if got := guestDo(t, devlxdclient.New(g.Socket()), "GET", "/1.0", ""); got.status != 200 || !strings.Contains(got.body, `"state":"Ready"`) {
		t.Fatalf("GET /1.0 after restart = %#v", got)
	}
	if got := d.PatchesSeen(); !reflect.DeepEqual(got, []string{"Ready"}) {
		t.Fatalf("daemon saw %q, want one Ready (no re-declaration to the same daemon)", got)
	}
}

func TestNewBootForgetsDeclaration(t *testing.T) {
	g := agenttest.NewGuest(t)
	d1 := agenttest.StartDaemon(t, g.Certs, g.UDS, 4111)
	p := agenttest.StartAgent(t, agentBin, g, "--boot-id", "first")
	advertise(t, d1)
	waitCond(t, "devlxd socket", func() bool { _, err := os.Stat(g.Socket()); return err == nil })
	if err := devlxdclient.Declare(ctxT(t), devlxdclient.New(g.Socket()), "Ready"); err != nil {
		t.Fatalf("declare Ready: %v", err)
	}
	if exited, err := p.Stop(wait); !exited || err != nil {
		t.Fatalf("stop: exited=%v err=%v", exited, err)
	}
	d1.Close()
	// Next boot, and the daemon restarted meanwhile: nothing is re-declared.
	d2 := agenttest.StartDaemon(t, g.Certs, g.UDS, 4112)
	agenttest.StartAgent(t, agentBin, g, "--boot-id", "second")
	advertise(t, d2)
	waitCond(t, "devlxd socket", func() bool { _, err := os.Stat(g.Socket()); return err == nil })
	// A re-declaration would have been sent before the PUT was answered.
	if got := guestDo(t, devlxdclient.New(g.Socket()), "GET", "/1.0", ""); !strings.Contains(got.body, `"state":"Started"`) {
		t.Fatalf("GET /1.0 in the new boot = %#v, want Started", got)
	}
	if got := d2.PatchesSeen(); len(got) != 0 {
		t.Fatalf("new boot re-declared %q to the new daemon", got)
	}
}

func TestRunErrors(t *testing.T) {
	g := agenttest.NewGuest(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown command", []string{"frobnicate"}, `guestlink-agent: unknown command "frobnicate"`},
		{"bad link", []string{"run", "--root", g.Root, "--link", "tcp:1"}, `guestlink-agent: parsing link "tcp:1": unknown link`},
		{"serial bad port name", []string{"run", "--root", g.Root, "--link", "serial:../x"}, "malformed link spec"},
		{"missing certs", []string{"run", "--root", t.TempDir(), "--link", "hybrid:/nonexistent/vm.sock"}, "guestlink-agent: loading agent key pair from"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := execCommand(agentBin, tt.args...).CombinedOutput()
			if err == nil {
				t.Fatalf("%v succeeded: %s", tt.args, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if last := lines[len(lines)-1]; !strings.Contains(last, tt.want) {
				t.Fatalf("last line %q, want it to contain %q", last, tt.want)
			}
		})
	}
}

// TestNotifiesSystemdWhenDevlxdAnswers: started by systemd (NOTIFY_SOCKET
// set, as for the Type=notify unit), the agent sends READY=1 once, and
// only when /dev/lxd/sock exists.
func TestNotifiesSystemdWhenDevlxdAnswers(t *testing.T) {
	g := agenttest.NewGuest(t)
	ring := agenttest.OpenRing(t, g, ringproto.PortCurrent)
	d := agenttest.StartDaemon(t, g.Certs, g.UDS, 4100)
	addr := filepath.Join(t.TempDir(), "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	t.Setenv("NOTIFY_SOCKET", addr)
	p := agenttest.StartAgent(t, agentBin, g, "--heartbeat", "200ms")
	ring.WaitFor(t, 0, ringproto.Started, wait)
	advertise(t, d)

	_ = ln.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 64)
	n, err := ln.Read(buf)
	if err != nil || string(buf[:n]) != "READY=1" {
		t.Fatalf("systemd got %q, %v; want READY=1", buf[:n], err)
	}
	if _, err := os.Stat(g.Socket()); err != nil {
		t.Fatalf("READY=1 before the devlxd socket exists: %v", err)
	}
	advertise(t, d) // a second advertisement does not notify again
	if exited, err := p.Stop(wait); !exited || err != nil {
		t.Fatalf("agent stop: exited=%v err=%v", exited, err)
	}
	_ = ln.SetReadDeadline(time.Now())
	if n, err := ln.Read(buf); err == nil {
		t.Fatalf("a second notification %q", buf[:n])
	}
}
