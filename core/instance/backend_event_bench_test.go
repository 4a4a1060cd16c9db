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
