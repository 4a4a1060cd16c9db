package agentmon

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/linkhost"
	"github.com/guestlink/guestlink/core/pki"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

type env struct {
	t     *testing.T
	svc   *Service
	insts *fakeInstances
	host  *linkhost.Host
	pki   *pki.Store
	clock *clock
	dir   string
}

func newEnv(t *testing.T, mutate func(*Config)) *env {
	t.Helper()
	dir := t.TempDir()
	store, err := pki.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	host, err := linkhost.New(linkhost.Config{DisableVsock: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	e := &env{t: t, host: host, pki: store, clock: &clock{}, dir: dir, insts: &fakeInstances{
		insts: map[string]*instance.Instance{}, rings: map[string]*fakeRing{}, states: map[string][]stateCall{},
	}}
	e.clock.ns.Store(time.Now().UnixNano())
	cfg := Config{
		Instances:         e.insts,
		Links:             host,
		Certs:             store,
		Now:               e.clock.now,
		FastPoll:          10 * time.Millisecond,
		StoppedPoll:       20 * time.Millisecond,
		ConnectedPoll:     40 * time.Millisecond,
		AdvertiseInterval: 20 * time.Millisecond,
		RequestTimeout:    10 * time.Second,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	e.svc, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.svc.Close() })
	return e
}

// guest creates a running instance with a hybrid link and its agent.
type guest struct {
	inst  *instance.Instance
	ep    *contract.LinkEndpoint
	ring  *fakeRing
	agent *fakeAgent
}

func (e *env) guest(name string) *guest {
	e.t.Helper()
	uuid := "uuid-" + name
	inst := &instance.Instance{Name: name, UUID: uuid, Config: map[string]string{"user.foo": "bar"},
		Devices: map[string]map[string]string{"root": {"type": "disk", "path": "/"}}}
	ring := &fakeRing{}
	e.insts.mu.Lock()
	e.insts.insts[uuid] = inst
	e.insts.rings[uuid] = ring
	e.insts.mu.Unlock()
	certs, err := e.pki.Instance(name)
	if err != nil {
		e.t.Fatal(err)
	}
	gdir := filepath.Join(e.dir, "guests", name)
	if err := os.MkdirAll(gdir, 0o700); err != nil {
		e.t.Fatal(err)
	}
	ep := &contract.LinkEndpoint{Kind: contract.LinkHybrid, Path: filepath.Join(gdir, "link.sock")}
	return &guest{inst: clone(inst), ep: ep, ring: ring, agent: startFakeAgent(e.t, ep.Path, certs)}
}

// waitFor waits up to 30 s until cond holds, evaluating it again at each
// change a fake records.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waitForWithin(t, what, 30*time.Second, cond)
}

func waitForWithin(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	if !waitUntil(d, cond) {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// waitUntil waits up to d until cond holds and reports whether it did.
func waitUntil(d time.Duration, cond func() bool) bool {
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	for {
		changed := changes.next() // before cond: a change in between wakes us
		if cond() {
			return true
		}
		select {
		case <-changed:
		case <-timeout.C:
			return cond()
		}
	}
}

// feed writes a word and waits until the monitor read it.
func (e *env) feed(g *guest, s string) {
	e.t.Helper()
	g.ring.write(s)
	e.svc.BackendEvent(g.inst, contract.Event{UUID: g.inst.UUID, Kind: contract.EventRingData})
	waitFor(e.t, "the ring to be read", g.ring.empty)
}

func (e *env) waitState(g *guest, st instance.AgentState) {
	e.t.Helper()
	waitFor(e.t, "agent state "+string(st), func() bool {
		got, _ := e.svc.AgentState(g.inst.UUID)
		return got == st && e.insts.lastState(g.inst.UUID) == st
	})
}

// barrier returns once the guest's monitor has gone through a whole loop
// (ring read, heartbeat check, state report) that began after the call: so
// it has seen the fake clock and every word written before. Two reads: the
// first began after the call, the second after the first's loop ended.
func (e *env) barrier(g *guest) {
	e.t.Helper()
	r0 := g.ring.readCount()
	for i := 1; i <= 2; i++ {
		e.svc.BackendEvent(g.inst, contract.Event{UUID: g.inst.UUID, Kind: contract.EventRingData})
		waitFor(e.t, "a ring read", func() bool { return g.ring.readCount() >= r0+i })
	}
}

// quiet returns once the monitor has nothing left to do: every word read
// and handled, no advertisement queued or under way, and the last PUT's
// result taken in (which could have asked for another).
func (e *env) quiet(g *guest) {
	e.t.Helper()
	m := e.svc.monitor(g.inst.UUID)
	if m == nil {
		e.t.Fatalf("%s is not monitored", g.inst.Name)
	}
	for range 100 {
		waitFor(e.t, "no advertisement pending", func() bool { return m.advPending.Load() == 0 })
		e.barrier(g)
		if m.advPending.Load() == 0 {
			return
		}
	}
	e.t.Fatal("the monitor keeps advertising")
}

// settle feeds CONNECTED heartbeats until one changes nothing (the agent
// confirmed the advertisement: no PUT follows) and returns the PUT count.
func (e *env) settle(g *guest) int {
	e.t.Helper()
	for range 100 {
		e.feed(g, "CONNECTED\n")
		e.quiet(g)
		n := len(g.agent.puts())
		e.feed(g, "CONNECTED\n")
		e.quiet(g)
		if len(g.agent.puts()) == n {
			return n
		}
	}
	e.t.Fatal("advertisements never stopped although the agent is connected")
	return 0
}
