package agentmon

import "sync"

// DefaultMaxAdvertising is Config.MaxAdvertising's default. An
// advertisement mostly waits: on the agent's validation (its TLS handshake
// to devlxd) and re-declaration, which waits for the store's group commit,
// so the advertisements run at once are what the commits batch. With 64
// a restarted daemon of 1,000 fleet guests advertised about 85 a second
// (1 of 2 cores busy, half of the advertisements waiting for a commit of
// about 30 declarations); with 256, about 170 a second.
const DefaultMaxAdvertising = 256

// advGate decides when an advertiser may make its PUT /1.0: not while the
// daemon's start-up recovery holds the advertisements (HoldAdvertisements),
// and those the hold kept waiting at most Config.MaxAdvertising at once. A restarted daemon
// advertises to every running guest; each advertisement is a TLS handshake
// with the agent, which answers with its own to the daemon and re-declares
// the guest's state. Made as each guest was recovered, those handshakes ran
// in the processes the recovery's plugin calls go through (the fleet host
// runs every fleet guest's agent), and the recovery's Recover and
// LinkEndpoint calls, 70 ms each at its start, took 0.5 – 1 s each once the
// advertisements began (600 fleet guests: 13 s of recovery instead of 3).
type advGate struct {
	slots chan struct{} // one per PUT /1.0 under way

	mu    sync.Mutex
	holds int           // HoldAdvertisements not yet released
	open  chan struct{} // closed while holds is zero
}

func newAdvGate(max int) *advGate {
	g := &advGate{slots: make(chan struct{}, max), open: make(chan struct{})}
	close(g.open)
	return g
}

// hold closes the gate until the returned function is called (once).
func (g *advGate) hold() (release func()) {
	g.mu.Lock()
	if g.holds == 0 {
		g.open = make(chan struct{})
	}
	g.holds++
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.holds--; g.holds == 0 {
				close(g.open)
			}
		})
	}
}

// opened returns a channel closed once no hold holds the gate (closed
// already when none does).
func (g *advGate) opened() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// enter waits while the gate is held, or until stop is closed (it then
// reports false). An advertisement that had to wait for a hold then takes
// one of the slots, so the burst a release lets go runs at most
// MaxAdvertising at once; one asked for while nothing holds the gate takes
// no slot, so no guest's agent (one that never answers keeps its
// advertiser busy for RequestTimeout) can delay other guests'
// advertisements beyond that burst. slot says whether leave must free one.
func (g *advGate) enter(stop <-chan struct{}) (slot, ok bool) {
	for {
		g.mu.Lock()
		open, held := g.open, g.holds > 0
		g.mu.Unlock()
		if !held && !slot {
			return false, true
		}
		if held {
			if slot {
				<-g.slots // held again while it waited for its slot
				slot = false
			}
			select {
			case <-open:
			case <-stop:
				return false, false
			}
		}
		if !slot {
			select {
			case g.slots <- struct{}{}:
				slot = true
			case <-stop:
				return false, false
			}
		}
		g.mu.Lock()
		held = g.holds > 0
		g.mu.Unlock()
		if !held {
			return true, true
		}
	}
}

// leave frees the slot enter took, if it took one.
func (g *advGate) leave(slot bool) {
	if slot {
		<-g.slots
	}
}

// HoldAdvertisements makes the advertisements (PUT /1.0 to the agents) wait
// until the returned release is called: the monitors start, read the rings
// and report the agents' words meanwhile. The daemon holds them during its
// start-up recovery, so that the plugin calls recovering the guests are
// not queued behind the TLS handshakes of the guests already recovered.
// Release is idempotent; Close ends the advertisers waiting.
func (s *Service) HoldAdvertisements() (release func()) { return s.adv.hold() }
