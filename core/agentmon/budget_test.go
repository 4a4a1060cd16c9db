package agentmon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/pki"
	"github.com/guestlink/guestlink/core/statebudget"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
	"github.com/guestlink/guestlink/plugins/shared/ringbuffer"
)

// The tests of this file run the monitor inside a synctest bubble: a guest
// floods or storms for simulated seconds, and what the monitor did (reads,
// recorded states, throttle records) is counted exactly, without sleeping
// in real time. The ring is a real ringbuffer.Ring (QEMU semantics).

// ringGuest is a running guest seen by one monitor: its ring buffer and
// what the monitor recorded.
type ringGuest struct {
	contract.Backend // only ReadRing is used
	ring             *ringbuffer.Ring
	inst             *instance.Instance

	mu        sync.Mutex
	reads     int
	readBytes int
	states    []instance.AgentState // each change recorded
	last      instance.AgentState
	throttles []string // budgets, one per recorded episode
}

func (g *ringGuest) ReadRing(_ context.Context, _ contract.Handle, max int) ([]byte, error) {
	data := g.ring.Read(max)
	g.mu.Lock()
	g.reads++
	g.readBytes += len(data)
	g.mu.Unlock()
	return data, nil
}

func (g *ringGuest) GetByUUID(context.Context, string) (*instance.Instance, error) {
	return g.inst, nil
}

func (g *ringGuest) SetAgentState(_ context.Context, _ string, st instance.AgentState, _ time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if st != g.last {
		g.states = append(g.states, st)
		g.last = st
	}
	return nil
}

func (g *ringGuest) Runtime(context.Context, string) (contract.Backend, contract.Handle, error) {
	return g, contract.Handle("h"), nil
}

func (g *ringGuest) GuestThrottled(_ context.Context, _, budget, _ string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.throttles = append(g.throttles, budget)
	return nil
}

// counts returns the reads, the recorded state changes, the last state and
// the throttle records so far.
func (g *ringGuest) counts() (reads int, changes []instance.AgentState, last instance.AgentState, throttles []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reads, append([]instance.AgentState(nil), g.states...), g.last, append([]string(nil), g.throttles...)
}

// deadLinks is a link host whose agents never answer: advertisements fail
// at once, which leaves the ring reads alone under test.
type deadLinks struct{}

func (deadLinks) Port() uint32                                { return 1 }
func (deadLinks) Attach(string, *contract.LinkEndpoint) error { return nil }
func (deadLinks) Detach(string)                               {}
func (deadLinks) DialAgent(context.Context, string) (net.Conn, error) {
	return nil, errors.New("no agent link in this test")
}

// testCerts returns a key store holding vm1's key pairs, made outside any
// bubble.
func testCerts(t testing.TB) *pki.Store {
	t.Helper()
	dir := t.TempDir()
	store, err := pki.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Instance("vm1"); err != nil {
		t.Fatal(err)
	}
	return store
}

// startRingGuest starts a monitor of one guest with a ring of ringSize
// bytes. It must run inside a synctest bubble; the monitor is stopped when
// the bubble's test ends.
func startRingGuest(t *testing.T, certs *pki.Store, ringSize int, mutate func(*Config)) (*Service, *ringGuest) {
	t.Helper()
	ring, err := ringbuffer.New(ringSize)
	if err != nil {
		t.Fatal(err)
	}
	g := &ringGuest{ring: ring, inst: &instance.Instance{Name: "vm1", UUID: "uuid-vm1", Backend: "qemu", Config: map[string]string{}}}
	cfg := Config{Instances: g, Links: deadLinks{}, Certs: certs, Throttles: g}
	if mutate != nil {
		mutate(&cfg)
	}
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	svc.GuestRunning(g.inst, nil)
	synctest.Wait()
	return svc, g
}

// write is the guest writing to its ring port: the bytes land in the ring
// and the backend announces them.
func (g *ringGuest) write(svc *Service, p []byte) {
	g.ring.Write(p)
	svc.BackendEvent(g.inst, contract.Event{UUID: g.inst.UUID, Kind: contract.EventRingData})
}

// TestRingFlood floods the ring for 10 simulated seconds, a write every
// millisecond (cat /dev/zero, a newline flood, a word flood), and checks
// that the monitor's reads stay within the byte budget (a few dozen a
// second whatever the guest does), that the episode is recorded once, and
// that once the guest stops flooding its agent is heard again.
func TestRingFlood(t *testing.T) {
	certs := testCerts(t)
	const (
		flood   = 10 * time.Second
		ringLen = 16 // QEMU's ring, as LXD sets it
	)
	tests := []struct {
		name  string
		chunk []byte
	}{
		{"zeros", make([]byte, 4096)},
		{"newlines", []byte(strings.Repeat("\n", 4096))},
		{"words", []byte(strings.Repeat("STARTED\n", 512))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				svc, g := startRingGuest(t, certs, ringLen, nil)
				for range flood / time.Millisecond {
					g.write(svc, tt.chunk)
					time.Sleep(time.Millisecond)
				}
				reads, _, _, throttles := g.counts()
				// The budget: DefaultRingBurstBytes at once, then
				// DefaultRingBytesPerSecond, each read costing at least
				// readCost; plus the timer's polls.
				most := (DefaultRingBurstBytes+int(flood.Seconds())*DefaultRingBytesPerSecond)/readCost + 2*int(flood.Seconds())
				if reads > most {
					t.Errorf("%d ring reads during a %v flood, want at most %d", reads, flood, most)
				}
				if len(throttles) != 1 || throttles[0] != instance.BudgetRing {
					t.Errorf("throttle records %q, want one %q", throttles, instance.BudgetRing)
				}
				// The flood ends; the agent's heartbeats are read once the
				// budget allows (the first may share its line with the
				// flood's tail, which poisons it).
				time.Sleep(2 * time.Second)
				for range 2 {
					g.write(svc, []byte("CONNECTED\n"))
					time.Sleep(time.Second)
				}
				synctest.Wait()
				if _, _, last, _ := g.counts(); last != instance.AgentConnected {
					t.Errorf("agent state after the flood = %q, want %q", last, instance.AgentConnected)
				}
				t.Logf("%d reads during the flood", reads)
			})
		})
	}
}

// TestRingFloodNoThrottleForRealAgent checks that an agent writing as a real
// one does (a word per heartbeat and each change) is never throttled.
func TestRingFloodNoThrottleForRealAgent(t *testing.T) {
	certs := testCerts(t)
	synctest.Test(t, func(t *testing.T) {
		svc, g := startRingGuest(t, certs, 16, func(c *Config) { c.Heartbeat = time.Second })
		words := []string{"STARTED\n", "CONNECTED\n", "STOPPED\n", "STARTED\n", "CONNECTED\n"}
		for i := range 300 {
			g.write(svc, []byte(words[min(i, len(words)-1)]))
			time.Sleep(time.Second)
		}
		synctest.Wait()
		_, changes, last, throttles := g.counts()
		if len(throttles) != 0 {
			t.Fatalf("throttle records %q for a real agent", throttles)
		}
		if len(changes) != len(words) || last != instance.AgentConnected {
			t.Fatalf("state changes %q (last %q), want %q", changes, last, words)
		}
	})
}

// TestRingWordStateStorm writes alternating STARTED and CONNECTED words, ten
// a second (within the ring budget), for 20 simulated seconds, then a last
// STOPPED: the recorded state changes stay within the state budget, the
// episode is recorded once, and the last word wins once the budget allows.
func TestRingWordStateStorm(t *testing.T) {
	certs := testCerts(t)
	const (
		storm = 20 * time.Second
		rate  = 2
		burst = 4
	)
	synctest.Test(t, func(t *testing.T) {
		svc, g := startRingGuest(t, certs, 16, func(c *Config) { c.StateBudget = statebudget.New(rate, burst) })
		words := []string{"STARTED\n", "CONNECTED\n"}
		for i := range int(storm / (100 * time.Millisecond)) {
			g.write(svc, []byte(words[i%2]))
			time.Sleep(100 * time.Millisecond)
		}
		g.write(svc, []byte("STOPPED\n"))
		synctest.Wait()
		_, changes, _, throttles := g.counts()
		if most := burst + rate*int(storm.Seconds()) + 1; len(changes) > most {
			t.Errorf("%d state changes in %v, want at most %d", len(changes), storm, most)
		}
		if len(changes) < rate*int(storm.Seconds())/2 {
			t.Errorf("only %d state changes in %v: the budget should allow about %d", len(changes), storm, rate*int(storm.Seconds()))
		}
		if len(throttles) != 1 || throttles[0] != instance.BudgetState {
			t.Errorf("throttle records %q, want one %q", throttles, instance.BudgetState)
		}
		time.Sleep(time.Second) // the budget refills: the held-back word applies
		synctest.Wait()
		if _, _, last, _ := g.counts(); last != instance.AgentStopped {
			t.Errorf("final agent state = %q, want %q (the last word)", last, instance.AgentStopped)
		}
	})
}

// TestDevlxdAndRingStorm storms both paths at once: ring words and devlxd
// PATCH /1.0 state changes (Budget.Allow, the call the devlxd handler makes)
// draw from one budget, so together they stay within it.
func TestDevlxdAndRingStorm(t *testing.T) {
	certs := testCerts(t)
	const (
		storm = 20 * time.Second
		rate  = 2
		burst = 4
	)
	synctest.Test(t, func(t *testing.T) {
		budget := statebudget.New(rate, burst)
		svc, g := startRingGuest(t, certs, 16, func(c *Config) { c.StateBudget = budget })
		words := []string{"STARTED\n", "CONNECTED\n"}
		patches := 0
		for i := range int(storm / (50 * time.Millisecond)) {
			if i%2 == 0 {
				g.write(svc, []byte(words[i/2%2]))
			} else if budget.Allow(g.inst.UUID) {
				patches++
			}
			time.Sleep(50 * time.Millisecond)
		}
		synctest.Wait()
		_, changes, _, _ := g.counts()
		total := len(changes) + patches
		if most := burst + rate*int(storm.Seconds()) + 1; total > most {
			t.Errorf("%d ring state changes + %d devlxd changes = %d in %v, want at most %d (one budget)",
				len(changes), patches, total, storm, most)
		}
		if len(changes) == 0 || patches == 0 {
			t.Errorf("ring changes %d, devlxd changes %d: both paths should get some of the budget", len(changes), patches)
		}
	})
}

// TestRingBudgetAdmit walks one guest's ring budget read by read: reads
// within it pass, a read over the bytes or the lines is refused whole
// (nothing taken) and pauses reads until a full read fits again, and every
// read costs at least readCost.
func TestRingBudgetAdmit(t *testing.T) {
	cfg := Config{RingBytesPerSecond: 1024, RingBurstBytes: RingReadMax, RingLinesPerSecond: 2, RingBurstLines: 4}
	b := newRingBudget(&cfg)
	t0 := time.Unix(1_000_000, 0)
	steps := []struct {
		name   string
		at     time.Duration
		data   string
		admit  bool
		paused time.Duration // how long reads are paused after the step (0: not)
	}{
		{"a word", 0, "STARTED\n", true, 0},
		{"an empty read costs readCost", 0, "", true, 0},
		{"two lines", 0, "A\nB\n", true, 0},
		// Lines: 1 left of 4, refused; reads resume when the bytes hold a
		// full read (768 missing at 1024/s) and the lines half their burst
		// (1 missing at 2/s): 750 ms.
		{"one line left in the burst", 0, "A\nB\n", false, 750 * time.Millisecond},
		{"still paused", 500 * time.Millisecond, "", false, 0},
		{"resumed", 750 * time.Millisecond, "CONNECTED\n", true, 0},
		{"a full read over the bytes", 750 * time.Millisecond, strings.Repeat("x", RingReadMax), false, 0},
	}
	for _, st := range steps {
		now := t0.Add(st.at)
		if st.name == "still paused" {
			if !b.paused(now) {
				t.Fatalf("%s: not paused at +%v", st.name, st.at)
			}
			continue
		}
		if b.paused(now) {
			t.Fatalf("%s: paused at +%v", st.name, st.at)
		}
		if got := b.admit([]byte(st.data), now); got != st.admit {
			t.Fatalf("%s: admit = %v, want %v", st.name, got, st.admit)
		}
		if st.paused > 0 {
			if got := b.resumeAt.Sub(now); got != st.paused {
				t.Fatalf("%s: paused for %v, want %v", st.name, got, st.paused)
			}
		}
		if !st.admit && !b.pausedUntil.after(now) {
			t.Fatalf("%s: backend events would still wake the monitor", st.name)
		}
	}
}

// TestEpisode checks that refusals less than throttleQuiet apart are one
// episode (reported once) and a refusal after a quiet spell starts another.
func TestEpisode(t *testing.T) {
	var e episode
	t0 := time.Unix(1_000_000, 0)
	for _, st := range []struct {
		at    time.Duration
		start bool
	}{
		{0, true},
		{time.Second, false},
		{time.Second + throttleQuiet - time.Millisecond, false},
		{3*time.Second + 2*throttleQuiet, true},
	} {
		if got := e.refuse(t0.Add(st.at)); got != st.start {
			t.Fatalf("refusal at +%v starts an episode: %v, want %v", st.at, got, st.start)
		}
	}
}

// TestRingOverBudgetNotParsed checks that a read over the budget is
// dropped whole, unparsed: a word in it changes nothing.
func TestRingOverBudgetNotParsed(t *testing.T) {
	certs := testCerts(t)
	synctest.Test(t, func(t *testing.T) {
		obs := &ringRecorder{}
		svc, g := startRingGuest(t, certs, 8192, func(c *Config) {
			c.RingBytesPerSecond, c.RingBurstBytes = 1024, RingReadMax
			c.RingObserver = obs
		})
		g.write(svc, []byte("CONNECTED\n")) // costs readCost of the burst
		synctest.Wait()
		if _, _, last, _ := g.counts(); last != instance.AgentConnected {
			t.Fatalf("agent state %q, want connected", last)
		}
		// A full read: more than the budget left.
		g.write(svc, append([]byte(strings.Repeat("x", RingReadMax-len("STOPPED\n"))), "STOPPED\n"...))
		synctest.Wait()
		time.Sleep(5 * time.Second) // the budget refills; nothing is left to read
		synctest.Wait()
		_, changes, last, throttles := g.counts()
		if last != instance.AgentConnected || len(changes) != 1 {
			t.Errorf("agent states %q: the word in the dropped read was applied", changes)
		}
		if len(throttles) != 1 {
			t.Errorf("throttle records %q, want one", throttles)
		}
		if n := g.ring.Len(); n != 0 {
			t.Errorf("%d bytes left in the ring: the dropped read should have consumed them", n)
		}
		// The observer saw the admitted read and the dropped one, under
		// the instance's backend.
		obs.mu.Lock()
		defer obs.mu.Unlock()
		want := []string{"read qemu 10 bytes 1 lines", fmt.Sprintf("dropped qemu %d bytes", RingReadMax)}
		if !slices.Equal(obs.calls, want) {
			t.Errorf("ring observer saw %q, want %q", obs.calls, want)
		}
	})
}

// ringRecorder records RingObserver calls.
type ringRecorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *ringRecorder) RingRead(backend string, n, lines int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf("read %s %d bytes %d lines", backend, n, lines))
}

func (r *ringRecorder) RingDropped(backend string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf("dropped %s %d bytes", backend, n))
}

var _ RingObserver = (*ringRecorder)(nil)
