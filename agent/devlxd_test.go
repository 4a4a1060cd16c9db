package agent_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/guestlink/guestlink/agent/agenttest"
	"github.com/guestlink/guestlink/agent/devlxdclient"
)

func TestDevlxdProxyByteExact(t *testing.T) {
	g := agenttest.NewGuest(t)
	d := agenttest.StartDaemon(t, g.Certs, g.UDS, 4103)
	agenttest.StartAgent(t, agentBin, g)
	advertise(t, d)
	waitCond(t, "devlxd socket", func() bool { _, err := os.Stat(g.Socket()); return err == nil })
	c := devlxdclient.New(g.Socket())

	const js, raw, text = "application/json", "application/octet-stream", "text/plain; charset=utf-8"
	tests := []struct {
		name, method, path, body string
		want                     answer
	}{
		{"root", "GET", "/", "", answer{200, js, "[\"/1.0\"]\n"}},
		{"info", "GET", "/1.0", "", answer{200, js, `{"state":"Started","api_version":"1.0","instance_type":"virtual-machine","location":"testhost","auth":"untrusted","supported_storage_drivers":[]}` + "\n"}},
		{"config list", "GET", "/1.0/config", "", answer{200, js, `["/1.0/config/cloud-init.user-data","/1.0/config/user.empty","/1.0/config/user.foo","/1.0/config/user.meta-data","/1.0/config/user.multi"]` + "\n"}},
		{"config value", "GET", "/1.0/config/user.foo", "", answer{200, raw, "bar"}},
		{"config multi-line with %s", "GET", "/1.0/config/user.multi", "", answer{200, raw, "line one\nline two %s %d\n#cloud-config\n"}},
		{"cloud-init user-data", "GET", "/1.0/config/cloud-init.user-data", "", answer{200, raw, "#cloud-config\nruncmd:\n - echo '%s' > /tmp/x\n"}},
		{"config unset", "GET", "/1.0/config/user.nope", "", answer{404, text, "Not Found\n"}},
		{"config empty", "GET", "/1.0/config/user.empty", "", answer{404, text, "Not Found\n"}},
		{"config forbidden", "GET", "/1.0/config/volatile.uuid", "", answer{403, text, "Forbidden\n"}},
		{"meta-data", "GET", "/1.0/meta-data", "", answer{200, raw, "instance-id: 9d2f\nlocal-hostname: web1\nextra: 1\n"}},
		{"devices", "GET", "/1.0/devices", "", answer{200, js, `{"eth0":{"hwaddr":"00:16:3e:11:22:33","network":"lxdbr0","type":"nic"},"root":{"path":"/","pool":"default","type":"disk"}}` + "\n"}},
		{"patch bad state", "PATCH", "/1.0", `{"state":"ready"}`, answer{400, text, "Invalid state \"ready\"\n"}},
		{"patch bad json", "PATCH", "/1.0", `{`, answer{400, text, "Invalid request body: unexpected end of JSON input\n"}},
		{"patch ready", "PATCH", "/1.0", `{"state":"Ready"}`, answer{200, raw, ""}},
		{"info after ready", "GET", "/1.0", "", answer{200, js, `{"state":"Ready","api_version":"1.0","instance_type":"virtual-machine","location":"testhost","auth":"untrusted","supported_storage_drivers":[]}` + "\n"}},
		{"unknown path", "GET", "/1.0/nope", "", answer{404, text, "Not Found\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := guestDo(t, c, tt.method, tt.path, tt.body); got != tt.want {
				t.Fatalf("%s %s =\n %#v\nwant\n %#v", tt.method, tt.path, got, tt.want)
			}
		})
	}

	t.Run("concurrent keep-alive", func(t *testing.T) {
		errs := make(chan error, 8)
		for w := 0; w < 8; w++ {
			go func() {
				for i := 0; i < 20; i++ {
					b, err := devlxdclient.Get(ctxT(t), c, "/1.0/config/user.foo")
					if err == nil && string(b) != "bar" {
						err = fmt.Errorf("got %q", b)
					}
					if err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for w := 0; w < 8; w++ {
			if err := <-errs; err != nil {
				t.Fatalf("concurrent GET: %v", err)
			}
		}
	})
}

func TestClientSubcommands(t *testing.T) {
	g := agenttest.NewGuest(t)
	d := agenttest.StartDaemon(t, g.Certs, g.UDS, 4104)
	agenttest.StartAgent(t, agentBin, g)
	run := func(args ...string) (string, error) {
		cmd := execCommand(agentBin, args...)
		cmd.Env = append(os.Environ(), "GUESTLINK_AGENT_ROOT="+g.Root)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// Before any advertisement there is no socket: wait-host times out.
	if out, err := run("wait-host", "--timeout", "300ms"); err == nil || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Fatalf("wait-host without socket = (%q, %v), want a one-line error", out, err)
	}
	advertise(t, d)
	if out, err := run("wait-host", "--timeout", "20s"); err != nil {
		t.Fatalf("wait-host: %v %s", err, out)
	}
	if out, err := run("ready"); err != nil {
		t.Fatalf("ready: %v %s", err, out)
	}
	if out, err := run("started", "--socket", g.Socket()); err != nil {
		t.Fatalf("started: %v %s", err, out)
	}
	if got := d.PatchesSeen(); !reflect.DeepEqual(got, []string{"Ready", "Started"}) {
		t.Fatalf("daemon saw PATCHes %q, want Ready, Started", got)
	}
	d.Lock()
	d.Devlxd = false
	d.Unlock()
	out, err := run("ready")
	if err == nil || !strings.Contains(out, "403: Forbidden") {
		t.Fatalf("ready with devlxd disabled = (%q, %v), want a 403 error", out, err)
	}
}

func TestEvents(t *testing.T) {
	g := agenttest.NewGuest(t)
	d := agenttest.StartDaemon(t, g.Certs, g.UDS, 4105)
	agenttest.StartAgent(t, agentBin, g)
	advertise(t, d)
	waitCond(t, "devlxd socket", func() bool { _, err := os.Stat(g.Socket()); return err == nil })

	// Raw stream, config only (and a type LXD does not know, accepted):
	// LXD's exact status line and headers, no chunking.
	conn, err := net.Dial("unix", g.Socket())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /1.0/events?type=config,lifecycle HTTP/1.1\r\nHost: lxd\r\n\r\n")
	br := bufio.NewReader(conn)
	const header = "HTTP/1.1 200 OK\nConnection: keep-alive\nContent-Type: application/json\nX-Content-Type-Options: nosniff\n\n"
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	head := make([]byte, len(header))
	if _, err := io.ReadFull(br, head); err != nil || string(head) != header {
		t.Fatalf("raw events header = (%q, %v), want %q", head, err, header)
	}

	// Websocket, both types.
	dialer := websocket.Dialer{NetDialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var nd net.Dialer
		return nd.DialContext(ctx, "unix", g.Socket())
	}}
	ws, _, err := dialer.DialContext(ctxT(t), "ws://lxd/1.0/events", nil)
	if err != nil {
		t.Fatalf("websocket: %v", err)
	}
	defer ws.Close()

	post := func(e string) {
		t.Helper()
		code, body, err := d.CallAgent(ctxT(t), http.MethodPost, "/1.0/events", []byte(e))
		if err != nil || code != 200 {
			t.Fatalf("POST /1.0/events = %d %s %v", code, body, err)
		}
	}
	// Subscriptions are registered by the agent asynchronously: post the
	// device event until the websocket sees it.
	devEv := `{"type":"device","timestamp":"2026-11-22T00:00:00.5Z","metadata":{"action":"added","name":"eth1","config":{"type":"nic"}}}`
	cfgEv := `{"type":"config","timestamp":"2026-11-22T00:00:01.25Z","metadata":{"key":"user.foo","old_value":"bar","value":"baz %s <b>&amp;"}}`
	// What LXD writes: encoding/json's defaults (<, > and & escaped) and a
	// newline, also in a websocket message.
	devWant := devEv + "\n"
	cfgWant := `{"type":"config","timestamp":"2026-11-22T00:00:01.25Z","metadata":{"key":"user.foo","old_value":"bar","value":"baz %s \u003cb\u003e\u0026amp;"}}` + "\n"
	got := make(chan string, 16)
	go func() {
		for {
			_ = ws.SetReadDeadline(time.Now().Add(wait))
			_, m, err := ws.ReadMessage()
			if err != nil {
				close(got)
				return
			}
			got <- string(m)
		}
	}()
	waitCond(t, "websocket subscribed", func() bool {
		post(devEv)
		select {
		case m := <-got:
			if m != devWant {
				t.Fatalf("websocket got %q, want %q", m, devWant)
			}
			return true
		case <-time.After(200 * time.Millisecond):
			return false
		}
	})
	post(cfgEv)
	select {
	case m := <-got:
		if m != cfgWant {
			t.Fatalf("websocket got %q, want %q", m, cfgWant)
		}
	case <-time.After(wait):
		t.Fatalf("websocket: no config event")
	}
	// The raw stream filters device events out: the first line is the
	// config event.
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	line, err := br.ReadString('\n')
	if err != nil || line != cfgWant {
		t.Fatalf("raw stream line = (%q, %v), want %q", line, err, cfgWant)
	}
}

func TestDevlxdDisabledRemovesSocket(t *testing.T) {
	g := agenttest.NewGuest(t)
	d := agenttest.StartDaemon(t, g.Certs, g.UDS, 4108)
	// agent.conf brings the socket up before any advertisement.
	g.WriteAgentConf(t, d.Advertisement().Marshal())
	agenttest.StartAgent(t, agentBin, g)
	waitCond(t, "early devlxd socket", func() bool { _, err := os.Stat(g.Socket()); return err == nil })
	c := devlxdclient.New(g.Socket())
	if got := guestDo(t, c, "GET", "/1.0/config/user.foo", ""); got.status != 200 || got.body != "bar" {
		t.Fatalf("early GET = %#v", got)
	}

	d.Lock()
	d.Devlxd = false
	d.Unlock()
	advertise(t, d) // 403 on GET /1.0 still counts as reachable
	waitCond(t, "devlxd socket removed", func() bool { _, err := os.Stat(g.Socket()); return errors.Is(err, os.ErrNotExist) })

	d.Lock()
	d.Devlxd = true
	d.Unlock()
	advertise(t, d)
	waitCond(t, "devlxd socket back", func() bool { _, err := os.Stat(g.Socket()); return err == nil })
}

// TestDaemonGone500 checks LXD's agent's answer when the daemon cannot be
// reached: 500 and "Failed connecting to devLXD over vsock: ...", after
// meta-data's retries (10 × 500 ms).
func TestDaemonGone500(t *testing.T) {
	g := agenttest.NewGuest(t)
	d := agenttest.StartDaemon(t, g.Certs, g.UDS, 4109)
	conf := d.Advertisement()
	d.Close() // agent.conf points at a daemon that is gone
	g.WriteAgentConf(t, conf.Marshal())
	agenttest.StartAgent(t, agentBin, g)
	waitCond(t, "early devlxd socket", func() bool { _, err := os.Stat(g.Socket()); return err == nil })
	got := guestDo(t, devlxdclient.New(g.Socket()), "GET", "/1.0/meta-data", "")
	// Exactly the kind of failure: the dial error names the hybrid link's
	// socket, a host path the guest must not see.
	if got.status != http.StatusInternalServerError || got.ctype != "text/plain; charset=utf-8" ||
		got.body != "Failed connecting to devLXD over vsock: daemon unreachable\n" || strings.Contains(got.body, g.UDS) {
		t.Fatalf("GET with daemon gone = %#v, want 500 text without a host path", got)
	}
}
