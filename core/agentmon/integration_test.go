package agentmon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/agent/agenttest"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/linkhost"
	"github.com/guestlink/guestlink/core/pki"
	"github.com/guestlink/guestlink/link/ringproto"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
	"github.com/guestlink/guestlink/transport/devlxd"
)

// readyInstances adds SetReady and Declare to fakeInstances for the devlxd
// handlers and the declarations agents hand back (redeclare.go).
type readyInstances struct {
	*fakeInstances
	mu    sync.Mutex
	ready []bool
	by    []string // each call's requestor protocol
	// failDeclares fails that many Declare calls, as a store that is
	// briefly unavailable does.
	failDeclares atomic.Int32
	failed       atomic.Int32
}

func (r *readyInstances) SetReady(_ context.Context, uuid string, ready bool, by events.Requestor) error {
	defer changes.notify()
	r.update(uuid, func(i *instance.Instance) { i.Config["volatile.last_state.ready"] = fmt.Sprint(ready) })
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ready = append(r.ready, ready)
	r.by = append(r.by, by.Protocol)
	return nil
}

func (r *readyInstances) Declare(ctx context.Context, uuid string, d instance.Declaration, by events.Requestor) error {
	if r.failDeclares.Add(-1) >= 0 {
		r.failed.Add(1)
		return errors.New("the store is unavailable (test)")
	}
	return r.SetReady(ctx, uuid, d.State == instance.DeclaredReady, by)
}

func (r *readyInstances) protocols() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.by...)
}

func (r *readyInstances) readyCalls() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bool(nil), r.ready...)
}

// daemon is the guest-link half of a daemon: link host, devlxd server and
// agent monitor, as daemon wires them.
type daemon struct {
	host *linkhost.Host
	srv  *devlxd.Server
	svc  *Service
}

func startDaemon(t testing.TB, insts *readyInstances, store *pki.Store) *daemon {
	t.Helper()
	host, err := linkhost.New(linkhost.Config{DisableVsock: true})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := devlxd.New(devlxd.Config{Instances: insts, Certs: store, Certificate: store.Daemon().TLS, Location: "testhost"})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(host) //nolint:errcheck // ends when host closes
	svc, err := New(Config{Instances: insts, Links: host, Certs: store, FastPoll: 50 * time.Millisecond, ConnectedPoll: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{host: host, srv: srv, svc: svc}
	t.Cleanup(d.stop)
	return d
}

func (d *daemon) stop() {
	d.svc.Close()
	d.host.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = d.srv.Shutdown(ctx)
}

// pipeRing stands in for the ring-buffer port: a FIFO the agent writes its
// words to, copied into the fake backend's ring.
func pipeRing(t testing.TB, root string, ring *fakeRing) {
	t.Helper()
	path := filepath.Join(root, "dev/virtio-ports", ringproto.PortCurrent)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	go func() {
		buf := make([]byte, 256)
		for {
			n, err := f.Read(buf)
			if n > 0 {
				ring.write(string(buf[:n]))
			}
			if err != nil {
				return
			}
		}
	}()
}

// guestGet calls the guest's /dev/lxd/sock.
func guestCall(t testing.TB, sock, method, path, body string) (int, string, string) {
	t.Helper()
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequest(method, "http://lxd"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s on /dev/lxd/sock: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// realAgent is a stand-in guest running the real agent binary, linked to a
// daemon half over a hybrid link.
type realAgent struct {
	g     *agenttest.Guest
	insts *readyInstances
	store *pki.Store
	d     *daemon
	proc  *agenttest.Process
	inst  *instance.Instance
	ep    *contract.LinkEndpoint
}

// startRealAgent builds and starts the agent and waits until it is
// connected to the daemon.
func startRealAgent(t testing.TB) *realAgent {
	t.Helper()
	bin, err := agenttest.BuildAgent()
	if err != nil {
		t.Fatal(err)
	}
	r := &realAgent{g: agenttest.NewGuest(t)}
	if r.store, err = pki.Open(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	r.insts = &readyInstances{fakeInstances: &fakeInstances{
		insts: map[string]*instance.Instance{}, rings: map[string]*fakeRing{}, states: map[string][]stateCall{},
	}}
	r.inst = &instance.Instance{Name: "vm1", UUID: "uuid-vm1", Config: map[string]string{"user.foo": "bar\n%s"}}
	ring := &fakeRing{}
	r.insts.insts[r.inst.UUID] = r.inst
	r.insts.rings[r.inst.UUID] = ring
	r.d = startDaemon(t, r.insts, r.store)
	// The config drive, as the manager passes GuestFiles to the backend.
	files, err := r.d.svc.GuestFiles(context.Background(), r.inst)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(r.g.Root, "run/guestlink-agent", f.Path), f.Data, os.FileMode(f.Mode)); err != nil {
			t.Fatal(err)
		}
	}
	pipeRing(t, r.g.Root, ring)
	r.ep = &contract.LinkEndpoint{Kind: contract.LinkHybrid, Path: r.g.UDS}
	r.proc = agenttest.StartAgent(t, bin, r.g, "--heartbeat", "500ms")
	r.d.svc.GuestRunning(clone(r.inst), r.ep)
	r.waitConnected(t, r.d.svc)
	return r
}

func (r *realAgent) waitConnected(t testing.TB, svc *Service) {
	t.Helper()
	connected := func() bool {
		st, _ := svc.AgentState(r.inst.UUID)
		return st == instance.AgentConnected
	}
	if !waitUntil(60*time.Second, connected) {
		st, _ := svc.AgentState(r.inst.UUID)
		t.Fatalf("agent state %q, want connected; agent log:\n%s", st, r.proc.Log())
	}
}

// TestRealAgentOverHybridLink runs the real guestlink-agent binary in a
// stand-in guest root with a hybrid link, against the real link host,
// devlxd server and monitor: the agent starts, is advertised, connects,
// serves /dev/lxd/sock through the daemon, declares Ready, and hands it
// back to a restarted daemon on a new port in its answer to the
// advertisement.
func TestRealAgentOverHybridLink(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the agent binary")
	}
	r := startRealAgent(t)
	g, insts, inst, agent := r.g, r.insts, r.inst, r.proc

	if code, ctype, body := guestCall(t, g.Socket(), "GET", "/1.0", ""); code != 200 || ctype != "application/json" ||
		body != `{"state":"Started","api_version":"1.0","instance_type":"virtual-machine","location":"testhost","auth":"untrusted","supported_storage_drivers":[]}`+"\n" {
		t.Fatalf("GET /1.0: %d %q %q", code, ctype, body)
	}
	if code, ctype, body := guestCall(t, g.Socket(), "GET", "/1.0/config/user.foo", ""); code != 200 || ctype != "application/octet-stream" || body != "bar\n%s" {
		t.Fatalf("GET /1.0/config/user.foo: %d %q %q", code, ctype, body)
	}
	if code, _, body := guestCall(t, g.Socket(), "GET", "/1.0/config/security.devlxd", ""); code != 403 || body != "Forbidden\n" {
		t.Fatalf("GET a hidden key: %d %q", code, body)
	}
	if code, _, body := guestCall(t, g.Socket(), "PATCH", "/1.0", `{"state":"Ready"}`); code != 200 || body != "" {
		t.Fatalf("PATCH Ready: %d %q", code, body)
	}
	if got := insts.readyCalls(); len(got) != 1 || !got[0] {
		t.Fatalf("SetReady calls %v, want [true]", got)
	}

	// The daemon restarts on a new port: the new daemon advertises itself,
	// the agent connects to it and hands Ready back; the new daemon's first
	// record of it fails (its store is briefly unavailable), so it
	// advertises again, asks again and records it then.
	oldPort := r.d.host.Port()
	r.d.stop()
	insts.update(inst.UUID, func(i *instance.Instance) { delete(i.Config, "volatile.last_state.ready") }) // cleared at start
	insts.failDeclares.Store(1)
	d2 := startDaemon(t, insts, r.store)
	if d2.host.Port() == oldPort {
		t.Log("the new daemon drew the same port")
	}
	d2.svc.GuestRunning(clone(inst), r.ep)
	r.waitConnected(t, d2.svc)
	if !waitUntil(60*time.Second, func() bool { return len(insts.readyCalls()) >= 2 }) {
		t.Fatalf("the agent did not re-declare Ready to the restarted daemon; agent log:\n%s", agent.Log())
	}
	if got := insts.readyCalls(); !got[1] {
		t.Fatalf("re-declared %v, want Ready", got)
	}
	// The first Ready came with PATCH /1.0, the restored one in the
	// agent's answer to the new daemon's advertisement (no PATCH).
	if got := insts.protocols(); len(got) != 2 || got[0] != "devlxd" || got[1] != "agent" {
		t.Fatalf("declarations recorded by %q, want [devlxd agent]", got)
	}
	if n := insts.failed.Load(); n != 1 {
		t.Fatalf("%d records failed, want the one made to fail", n)
	}
	if code, _, body := guestCall(t, g.Socket(), "GET", "/1.0", ""); code != 200 || !strings.Contains(body, `"state":"Ready"`) {
		t.Fatalf("GET /1.0 after restart: %d %q", code, body)
	}

	// A clean agent exit is seen as stopped.
	if exited, err := agent.Stop(20 * time.Second); !exited {
		t.Fatalf("agent did not exit on SIGTERM: %v", err)
	} else if err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("agent exit: %v", err)
	}
	waitFor(t, "agent state stopped after its exit", func() bool {
		st, _ := d2.svc.AgentState(inst.UUID)
		return st == instance.AgentStopped
	})
}
