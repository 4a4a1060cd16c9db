package instance

import (
	"sync/atomic"
	"testing"

	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// countHooks counts BackendEvent calls and records nothing else, so a
// benchmark measures the manager's work and not the hook's.
type countHooks struct {
	recHooks
	events atomic.Int64
}

func (h *countHooks) BackendEvent(*Instance, contract.Event) { h.events.Add(1) }

// BenchmarkBackendEventHeartbeat is the manager's work for one pushed
// heartbeat (a ring-data event of a running guest) between the plugin
// host's OnEvent and the agent monitor's hook (issue 28: 2,000 a second at
// 10,000 guests): the lookup, the owner check and the hook's call, on the
// real SQLite store's loaded instances. allocs/op is the figure to watch.
func BenchmarkBackendEventHeartbeat(b *testing.B) {
	e := newEnv(b)
	hooks := &countHooks{}
	m, err := NewManager(Config{Store: e.store, Backends: fakeBackends{"fake": e.be}, Bus: e.bus,
		Hooks: hooks, Files: e.files, DefaultBackend: "fake"})
	if err != nil {
		b.Fatal(err)
	}
	inst, err := m.Create(bg, CreateRequest{Name: "web1", Start: true}, adminCaller)
	if err != nil {
		b.Fatal(err)
	}
	ev := contract.Event{UUID: inst.UUID, Kind: contract.EventRingData, Ring: []byte("CONNECTED\n")}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		ev.RingSeq++
		m.HandleBackendEvent("fake", ev)
	}
	b.StopTimer()
	if got := hooks.events.Load(); got != int64(b.N) {
		b.Fatalf("the hook saw %d of %d heartbeats", got, b.N)
	}
}

// identityHooks keeps the instances BackendEvent got.
type identityHooks struct {
	recHooks
	got []*Instance
}

func (h *identityHooks) BackendEvent(inst *Instance, _ contract.Event) { h.got = append(h.got, inst) }

// TestBackendEventIdentity: a manager that has not loaded its instances
// yet (a daemon just started) loads them for the first backend event, and
// the hint hooks get the instance's identity, the same one at every
// heartbeat, with no allocation in the manager once loaded.
func TestBackendEventIdentity(t *testing.T) {
	e := newEnv(t)
	inst, err := e.m.Create(bg, CreateRequest{Name: "web1", Start: true}, adminCaller)
	if err != nil {
		t.Fatal(err)
	}
	hooks := &identityHooks{}
	m, err := NewManager(Config{Store: e.store, Backends: fakeBackends{"fake": e.be}, Bus: e.bus,
		Hooks: hooks, Files: e.files, DefaultBackend: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	if m.loaded.Load() {
		t.Fatal("a new manager has its instances loaded before any call")
	}
	ev := contract.Event{UUID: inst.UUID, Kind: contract.EventRingData, RingSeq: 1}
	m.HandleBackendEvent("fake", ev)
	ev.RingSeq++
	m.HandleBackendEvent("fake", ev)
	if len(hooks.got) != 2 {
		t.Fatalf("the hook got %d of 2 ring-data events", len(hooks.got))
	}
	id := hooks.got[0]
	if id.Name != "web1" || id.UUID != inst.UUID || id.Backend != "fake" {
		t.Errorf("identity %q %q %q, want web1 %q fake", id.Name, id.UUID, id.Backend, inst.UUID)
	}
	if hooks.got[1] != id {
		t.Error("the second heartbeat got a new identity instance")
	}
	hooks.got = make([]*Instance, 0, 200)
	if n := testing.AllocsPerRun(100, func() { ev.RingSeq++; m.HandleBackendEvent("fake", ev) }); n != 0 {
		t.Errorf("%.1f allocations per heartbeat in the manager, want 0", n)
	}
	// Another backend's event for it reaches no hook.
	before := len(hooks.got)
	m.HandleBackendEvent("other", ev)
	if len(hooks.got) != before {
		t.Error("another backend's ring-data event reached the hook")
	}
}
