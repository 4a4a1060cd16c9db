// Package apitest runs a real admin API server on a Unix socket in a test's
// temporary directory, backed by the real event bus (over an in-memory event
// log) and an in-memory instance service that follows the manager's
// contract: the same error kinds, lifecycle events and timeline entries.
// Tests of the API, the client and the CLI share it.
package apitest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/auth"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/pluginhost"
	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/transport/adminapi"
)

// Options tune a test server; the zero value is fine.
type Options struct {
	BusBuffer    int           // events.WithBuffer; small values make subscriptions overflow
	PingInterval time.Duration // adminapi.Config.PingInterval
	BodyLimit    int           // adminapi.Config.BodyLimit
	// Auth gives the API a real authentication service (core/auth over a
	// SQLite store in the test's directory), so TCP requests can
	// authenticate; Server.Auth is then set.
	Auth bool
	// AuthNow is the auth service's clock (default time.Now).
	AuthNow func() time.Time
	// Hosts is adminapi.Config.Hosts.
	Hosts []string
	// DashboardURL is the base of dashboard login URLs ("" : none).
	DashboardURL string
	// Metrics is adminapi.Config.Metrics (nil: no /metrics route).
	Metrics http.Handler
	// Consoles is adminapi.Config.Consoles (nil: the console route answers 501).
	Consoles adminapi.Consoles
	// Images is adminapi.Config.Images (nil: /1.0/images answers 501).
	Images adminapi.ImageService
	// Storage is adminapi.Config.Storage (nil: /1.0/storage-pools answers 501).
	Storage adminapi.Storage
}

// Server is a running admin API on a Unix socket.
type Server struct {
	API       *adminapi.API
	Dir       string // the state directory
	Socket    string // Dir/guestlink.sock
	Bus       *events.Bus
	Store     *MemEventStore
	Instances *Instances
	Backends  *Backends
	Auth      *auth.Service // with Options.Auth

	subs atomic.Int64
}

// Subscriptions returns how many event subscriptions the API made.
func (s *Server) Subscriptions() int { return int(s.subs.Load()) }

// countingSource counts the subscriptions of the API.
type countingSource struct {
	bus *events.Bus
	n   *atomic.Int64
}

// Subscribe subscribes to the bus.
func (c *countingSource) Subscribe(f events.Filter) (*events.Subscription, error) {
	c.n.Add(1)
	return c.bus.Subscribe(f)
}

var (
	_ adminapi.EventSource = (*countingSource)(nil)
	_ adminapi.EventSource = (*events.Bus)(nil)
)

// NewServer starts an admin API on a Unix socket under t.TempDir(); it is
// shut down when the test ends.
func NewServer(t testing.TB, opts Options) *Server {
	t.Helper()
	dir := t.TempDir()
	store := &MemEventStore{}
	var busOpts []events.Option
	if opts.BusBuffer > 0 {
		busOpts = append(busOpts, events.WithBuffer(opts.BusBuffer))
	}
	bus := events.New(store, busOpts...)
	s := &Server{
		Dir:       dir,
		Socket:    filepath.Join(dir, "guestlink.sock"),
		Bus:       bus,
		Store:     store,
		Instances: NewInstances(bus, dir),
		Backends:  &Backends{},
	}
	s.Backends.Set(DefaultBackends()...)
	s.Instances.Images = opts.Images
	var authn adminapi.Authenticator
	if opts.Auth {
		s.Auth = newAuth(t, dir, opts.AuthNow)
		authn = s.Auth
	}
	s.API = adminapi.New(adminapi.Config{
		Auth:         authn,
		Hosts:        opts.Hosts,
		DashboardURL: func() string { return opts.DashboardURL },
		Consoles:     opts.Consoles,
		Instances:    s.Instances,
		Events:       &countingSource{bus: bus, n: &s.subs},
		Backends:     s.Backends,
		Version:      "test",
		Images:       opts.Images,
		Storage:      opts.Storage,
		BodyLimit:    opts.BodyLimit,
		PingInterval: opts.PingInterval,
		Metrics:      opts.Metrics,
	})
	ln, err := adminapi.ListenUnix(s.Socket)
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- s.API.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.API.Shutdown(ctx); err != nil {
			t.Errorf("shutting down the API: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serving the API: %v", err)
		}
		_ = bus.Close()
	})
	return s
}

// Dial connects to the server's socket (for http.Transport.DialContext).
func (s *Server) Dial(ctx context.Context, _, _ string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", s.Socket)
}

// Backends is a settable list of backend plugins.
type Backends struct {
	mu   sync.Mutex
	list []pluginhost.Status
}

// DefaultBackends returns the plugins a test server starts with: "sim"
// (healthy) and "qemu" (restarting).
func DefaultBackends() []pluginhost.Status {
	return []pluginhost.Status{
		{Name: "sim", Path: "/usr/lib/guestlink/plugins/sim", Version: "0.1.0", Capabilities: []sdk.Capability{"devlxd-socket"}, Health: pluginhost.HealthHealthy, PID: 4242,
			ConfigPrefixes: []string{"sim."}, ConfigSchema: []sdk.ConfigKey{
				{Name: "sim.command", Type: sdk.ConfigString, Default: "`sleep 1`", Doc: "guest command"},
				{Name: "sim.ring_size", Type: sdk.ConfigInt, Default: "`16`", Doc: "ring bytes"},
			}},
		{Name: "qemu", Path: "/usr/lib/guestlink/plugins/qemu", Version: "0.1.0", Capabilities: []sdk.Capability{sdk.CapStateful, "vsock"}, Health: pluginhost.HealthRestarting, Restarts: 2, LastError: "plugin exited: signal: killed"},
	}
}

// RestartWait restarts a plugin as plugins/pluginhost does when it comes back
// at once: it is made healthy, its restarts counted, its failures, retry
// time and error cleared. An unknown name is errdefs.ErrNotFound.
func (b *Backends) RestartWait(_ context.Context, name string) (pluginhost.Status, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range b.list {
		if st := &b.list[i]; st.Name == name {
			st.Health, st.Restarts, st.Failures, st.NextRetryAt, st.LastError = pluginhost.HealthHealthy, st.Restarts+1, 0, nil, ""
			if st.PID == 0 {
				st.PID = 4343
			}
			return *st, nil
		}
	}
	return pluginhost.Status{}, fmt.Errorf("restarting backend %q: %w", name, errdefs.ErrNotFound)
}

// Set replaces the list.
func (b *Backends) Set(list ...pluginhost.Status) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.list = slices.Clone(list)
}

// List returns the plugins.
func (b *Backends) List() []pluginhost.Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.list)
}

var _ adminapi.Backends = (*Backends)(nil)

// MemEventStore is an in-memory event log for events.Bus.
type MemEventStore struct {
	mu     sync.Mutex
	events []*events.Record
}

// AppendEvent stores ev and gives it the next id.
func (m *MemEventStore) AppendEvent(_ context.Context, ev *events.Record) error {
	if ev == nil {
		return errors.New("appending event: nil event")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ev.ID = int64(len(m.events)) + 1
	c := *ev
	c.Body = slices.Clone(ev.Body)
	m.events = append(m.events, &c)
	return nil
}

// EventsAfter returns up to limit events with an id greater than after.
func (m *MemEventStore) EventsAfter(_ context.Context, after int64, limit int) ([]*events.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if after < 0 {
		after = 0
	}
	if after >= int64(len(m.events)) {
		return nil, nil
	}
	rest := m.events[after:]
	if limit > 0 && len(rest) > limit {
		rest = rest[:limit]
	}
	out := make([]*events.Record, len(rest))
	for i, e := range rest {
		c := *e
		out[i] = &c
	}
	return out, nil
}

// LastEventID returns the newest id (0 if none).
func (m *MemEventStore) LastEventID(context.Context) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return int64(len(m.events)), nil
}

var _ events.EventStore = (*MemEventStore)(nil)

// newAuth returns an authentication service over a SQLite store in dir,
// closed when the test ends.
func newAuth(t testing.TB, dir string, now func() time.Time) *auth.Service {
	t.Helper()
	st, err := db.Open(context.Background(), "sqlite://"+filepath.Join(dir, "auth.db"))
	if err != nil {
		t.Fatalf("opening the auth store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	svc, err := auth.New(auth.Config{Store: st.(auth.Store), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// BearerToken creates the identity bearer/name and returns a token for it.
func (s *Server) BearerToken(t testing.TB, name string) string {
	t.Helper()
	if s.Auth == nil {
		t.Fatal("BearerToken needs Options.Auth")
	}
	ctx := context.Background()
	if _, err := s.Auth.CreateIdentity(ctx, name, "test", ""); err != nil {
		t.Fatal(err)
	}
	token, _, err := s.Auth.IssueToken(ctx, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// ServeTCP serves the API on a new loopback TCP listener and returns its
// address (host:port).
func (s *Server) ServeTCP(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.API.Serve(ln) }()
	return ln.Addr().String()
}

// Install pretends to install the plugin binary at src as name: the
// plugin is added (or replaced) healthy, with src as its path.
func (b *Backends) Install(_ context.Context, name, src string) (pluginhost.Status, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := pluginhost.Status{Name: name, Path: src, Version: "0.2.0", Health: pluginhost.HealthHealthy, PID: 5151}
	for i := range b.list {
		if b.list[i].Name == name {
			st.Restarts = b.list[i].Restarts + 1
			b.list[i] = st
			return st, nil
		}
	}
	b.list = append(b.list, st)
	return st, nil
}

// Reload restarts the named plugin as RestartWait does; a plugin named
// "tampered" fails with a checksum error showing both hashes.
func (b *Backends) Reload(ctx context.Context, name string) (pluginhost.Status, error) {
	if name == "tampered" {
		return pluginhost.Status{}, fmt.Errorf("reloading backend %q: SHA256SUMS says sha256 %s for %q, the file has sha256 %s: %w: %w",
			name, strings.Repeat("a", 64), name, strings.Repeat("b", 64), pluginhost.ErrChecksum, errdefs.ErrConflict)
	}
	return b.RestartWait(ctx, name)
}
