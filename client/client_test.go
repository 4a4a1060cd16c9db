package client_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	)
}

// newClient starts a test server and a client of its socket.
func newClient(t *testing.T, opts apitest.Options) (*apitest.Server, *client.Client) {
	t.Helper()
	srv := apitest.NewServer(t, opts)
	c, err := client.New(srv.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return srv, c
}

func TestNew(t *testing.T) {
	for _, tt := range []struct {
		addr string
		ok   bool
	}{
		{"/run/guestlink/guestlink.sock", true},
		{"unix:///run/guestlink.sock", true},
		{"http://127.0.0.1:8443", true},
		{"", false},
		{"http://", false},
		{"http://127.0.0.1:1/x", false},
		{"https://127.0.0.1:8443", true},
		{"https://127.0.0.1:8443/x", false},
	} {
		t.Run(tt.addr, func(t *testing.T) {
			_, err := client.New(tt.addr)
			if (err == nil) != tt.ok {
				t.Fatalf("New(%q) error = %v, want ok %v", tt.addr, err, tt.ok)
			}
		})
	}
}

func TestInstances(t *testing.T) {
	srv, c := newClient(t, apitest.Options{})
	ctx := context.Background()

	info, err := c.ServerInfo(ctx)
	if err != nil || info.Environment.Server != "guestlink" || info.APIVersion != "1.0" {
		t.Fatalf("ServerInfo = %+v, %v", info, err)
	}
	inst, err := c.Create(ctx, api.InstancesPost{Name: "web1", Backend: "sim", Config: map[string]string{"user.a": "1"}})
	if err != nil || inst.Name != "web1" || inst.Status != "Stopped" {
		t.Fatalf("Create = %+v, %v", inst, err)
	}
	st, err := c.SetState(ctx, "web1", api.InstanceStatePut{Action: api.ActionStart})
	if err != nil || st.Status != "Running" || st.Boot != 1 {
		t.Fatalf("SetState start = %+v, %v", st, err)
	}
	if err := srv.Instances.SetReady("web1"); err != nil {
		t.Fatal(err)
	}
	if st, err = c.State(ctx, "web1"); err != nil || st.StatusCode != 113 {
		t.Fatalf("State = %+v, %v", st, err)
	}
	inst, err = c.UpdateConfig(ctx, "web1", map[string]string{"user.b": "2"}, []string{"user.a"})
	if err != nil || inst.Config["user.b"] != "2" || inst.Config["user.a"] != "" {
		t.Fatalf("UpdateConfig = %+v, %v", inst, err)
	}
	inst, err = c.Instance(ctx, "web1")
	if err != nil || len(inst.Timeline) != 3 || inst.Timeline[2].To != "Ready" {
		t.Fatalf("Instance = %+v, %v", inst, err)
	}
	tl, err := c.Timeline(ctx, "web1", 2)
	if err != nil || len(tl) != 2 {
		t.Fatalf("Timeline = %+v, %v", tl, err)
	}
	list, err := c.Instances(ctx, client.InstanceFilter{Status: "Running"})
	if err != nil || len(list) != 1 || list[0].Name != "web1" {
		t.Fatalf("Instances(Running) = %+v, %v", list, err)
	}
	list, err = c.Instances(ctx, client.InstanceFilter{Backend: "qemu"})
	if err != nil || len(list) != 0 {
		t.Fatalf("Instances(qemu) = %+v, %v", list, err)
	}
	backends, err := c.Backends(ctx)
	if err != nil || len(backends) != 2 || backends[1].Name != "sim" {
		t.Fatalf("Backends = %+v, %v", backends, err)
	}
	if err := c.Delete(ctx, "web1", true); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := c.Instance(ctx, "web1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Instance after delete: %v", err)
	}
}

func TestStatusErrors(t *testing.T) {
	_, c := newClient(t, apitest.Options{})
	ctx := context.Background()
	if _, err := c.Create(ctx, api.InstancesPost{Name: "a1", Backend: "sim", Start: true}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		call func() error
		code int
		kind error
		msg  string
	}{
		{"not found", func() error { _, err := c.Instance(ctx, "zz"); return err }, 404, errdefs.ErrNotFound, `instance "zz": not found`},
		{"duplicate", func() error {
			_, err := c.Create(ctx, api.InstancesPost{Name: "a1", Backend: "sim"})
			return err
		}, 409, errdefs.ErrAlreadyExists, `creating instance "a1": already exists`},
		{"conflict", func() error {
			_, err := c.SetState(ctx, "a1", api.InstanceStatePut{Action: "start"})
			return err
		}, 409, errdefs.ErrConflict, `starting instance "a1": already running: conflict`},
		{"invalid action", func() error {
			_, err := c.SetState(ctx, "a1", api.InstanceStatePut{Action: "pause"})
			return err
		}, 400, errdefs.ErrInvalid, `invalid action "pause": must be start, stop or restart`},
		{"delete running", func() error { return c.Delete(ctx, "a1", false) }, 409, errdefs.ErrConflict,
			`deleting instance "a1": running, stop it first or force: conflict`},
		{"bad name in path", func() error { _, err := c.Instance(ctx, "a/b"); return err }, 400, errdefs.ErrInvalid,
			`invalid instance name "a/b": character '/' at position 1 is not a letter, digit or hyphen: invalid argument`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var se *client.StatusError
			if !errors.As(err, &se) {
				t.Fatalf("error %v (%T) is not a StatusError", err, err)
			}
			if se.Code != tt.code || se.Message != tt.msg || !errors.Is(err, tt.kind) {
				t.Fatalf("got %d %q, want %d %q (kind %v)", se.Code, se.Message, tt.code, tt.msg, tt.kind)
			}
		})
	}
}

func TestUnavailable(t *testing.T) {
	c, err := client.New(t.TempDir() + "/none.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.ServerInfo(context.Background())
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "no such file or directory") {
		t.Fatalf("ServerInfo on a missing socket: %v", err)
	}
	evc, errc := c.Events(context.Background(), client.EventFilter{})
	if _, ok := <-evc; ok {
		t.Fatal("event from a missing socket")
	}
	if err := <-errc; !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("Events on a missing socket: %v", err)
	}
}

func TestTCP(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{Auth: true})
	addr := srv.ServeTCP(t)
	token := srv.BearerToken(t, "ci")
	ctx := context.Background()
	for _, tt := range []struct {
		name  string
		token string
		code  int
	}{
		{"no token", "", 401},
		{"wrong token", "glb_" + strings.Repeat("A", 43), 401},
		{"garbage", "nope", 401},
		{"good token", token, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := client.NewWithOptions("http://"+addr, client.Options{Token: tt.token})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.Instances(ctx, client.InstanceFilter{})
			var se *client.StatusError
			switch {
			case tt.code == 0 && err != nil:
				t.Fatalf("Instances: %v", err)
			case tt.code != 0 && (!errors.As(err, &se) || se.Code != tt.code):
				t.Fatalf("Instances error = %v, want %d", err, tt.code)
			}
		})
	}
	c, err := client.NewWithOptions("http://"+addr, client.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Create(ctx, api.InstancesPost{Name: "t1", Backend: "sim"}); err != nil {
		t.Fatal(err)
	}
	by := srv.Instances.LastRequestor()
	if by.Protocol != "bearer" || by.Username != "bearer/ci" || !strings.HasPrefix(by.Address, "127.0.0.1:") {
		t.Fatalf("requestor over TCP = %+v", by)
	}
	// The events websocket authenticates too: with the token it streams
	// (the next change arrives), without it the upgrade is refused.
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	evc, errc := c.Events(ectx, client.EventFilter{})
	if _, err := c.UpdateConfig(ctx, "t1", map[string]string{"user.x": "1"}, nil); err != nil {
		t.Fatal(err)
	}
	collect(t, evc, errc, 1)
	noAuth, err := client.New("http://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	defer noAuth.Close()
	_, errc2 := noAuth.Events(ctx, client.EventFilter{})
	var se *client.StatusError
	if err := <-errc2; !errors.As(err, &se) || se.Code != 401 {
		t.Fatalf("events without a token: %v, want 401", err)
	}
}

// collect reads n events or fails.
func collect(t *testing.T, evc <-chan api.Event, errc <-chan error, n int) []api.Event {
	t.Helper()
	var out []api.Event
	timeout := time.After(30 * time.Second)
	for len(out) < n {
		select {
		case ev, ok := <-evc:
			if !ok {
				t.Fatalf("stream ended after %d events: %v", len(out), <-errc)
			}
			out = append(out, ev)
		case <-timeout:
			t.Fatalf("got %d of %d events", len(out), n)
		}
	}
	return out
}

func TestEvents(t *testing.T) {
	_, c := newClient(t, apitest.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	evc, errc := c.Events(ctx, client.EventFilter{Types: []string{"lifecycle"}, Instances: []string{"e1"}})
	for _, name := range []string{"other", "e1"} {
		if _, err := c.Create(ctx, api.InstancesPost{Name: name, Backend: "sim", Start: true}); err != nil {
			t.Fatal(err)
		}
	}
	got := collect(t, evc, errc, 2)
	var desc []string
	for _, ev := range got {
		lc, err := ev.Lifecycle()
		if err != nil {
			t.Fatal(err)
		}
		desc = append(desc, ev.Instance+" "+lc.Action)
	}
	if strings.Join(desc, ",") != "e1 instance-created,e1 instance-started" {
		t.Fatalf("events = %v", desc)
	}

	// Resume from the first event: the second arrives again, alone.
	ctx2, cancel2 := context.WithCancel(ctx)
	evc2, errc2 := c.Events(ctx2, client.EventFilter{Instances: []string{"e1"}, Since: got[0].ID})
	if again := collect(t, evc2, errc2, 1); again[0].ID != got[1].ID {
		t.Fatalf("resumed id %d, want %d", again[0].ID, got[1].ID)
	}
	cancel2()
	for range evc2 {
	}
	if err, ok := <-errc2; ok {
		t.Fatalf("error after cancel: %v", err)
	}

	cancel()
	for range evc {
	}
}

func TestEventsBadFilter(t *testing.T) {
	_, c := newClient(t, apitest.Options{})
	_, errc := c.Events(context.Background(), client.EventFilter{Types: []string{"agent"}})
	err := <-errc
	var se *client.StatusError
	if !errors.As(err, &se) || se.Code != http.StatusBadRequest || se.Message != `invalid event type "agent": must be lifecycle or logging` {
		t.Fatalf("bad filter: %v", err)
	}
}

// TestEventsResumeAfterOverflow makes the daemon drop a slow subscriber and
// checks that the client resumes on its own without loss or duplicates.
func TestEventsResumeAfterOverflow(t *testing.T) {
	srv, c := newClient(t, apitest.Options{BusBuffer: 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evc, errc := c.Events(ctx, client.EventFilter{Instances: []string{"o1"}})

	pad := strings.Repeat("x", 8192)
	const n = 600
	var lastID int64
	for i := range n {
		ev := events.NewLifecycle("burst", "o1", map[string]any{"i": i, "pad": pad}, nil)
		pub, err := srv.Bus.Publish(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		lastID = pub.ID
	}
	// The channel holds 64 events and the socket a few hundred KiB: the
	// server-side subscription of 2 overflows while nobody reads.
	got := collect(t, evc, errc, n)
	for i, ev := range got {
		if ev.ID != int64(i+1) {
			t.Fatalf("event %d has id %d", i, ev.ID)
		}
	}
	if got[n-1].ID != lastID {
		t.Fatalf("last id %d, want %d", got[n-1].ID, lastID)
	}
	if subs := srv.Subscriptions(); subs < 2 {
		t.Fatalf("%d subscriptions: the stream never overflowed, the test proves nothing", subs)
	}
}
