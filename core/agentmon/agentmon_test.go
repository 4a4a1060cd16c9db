package agentmon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/guestview"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/linkhost"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/link/advert"
	"github.com/guestlink/guestlink/link/devlxdapi"
	"github.com/guestlink/guestlink/link/hybrid"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

func TestAdvertiseUntilConnected(t *testing.T) {
	e := newEnv(t, nil)
	g := e.guest("vm1")
	e.svc.GuestRunning(g.inst, g.ep)
	waitFor(t, "the advertisement at GuestRunning", func() bool { return len(g.agent.puts()) >= 1 })
	ad := g.agent.puts()[0]
	want := advert.Advertisement{CID: 2, Port: e.host.Port(), Certificate: string(e.pki.Daemon().CertPEM), Devlxd: true}
	if *ad != want {
		t.Fatalf("advertisement %+v, want %+v", *ad, want)
	}
	before := len(g.agent.puts())
	e.feed(g, "STARTED\n")
	e.waitState(g, instance.AgentStarted)
	waitFor(t, "an advertisement after STARTED", func() bool { return len(g.agent.puts()) > before })
	e.feed(g, "CONNECTED\n")
	e.waitState(g, instance.AgentConnected)
	n := e.settle(g)
	for range 5 {
		e.feed(g, "CONNECTED\n")
	}
	e.quiet(g) // every heartbeat handled, no PUT queued or under way
	if got := len(g.agent.puts()); got != n {
		t.Fatalf("%d advertisements after confirmation, want %d", got, n)
	}
	// The agent restarted (or lost the daemon): STARTED after CONNECTED.
	e.feed(g, "STARTED\n")
	e.waitState(g, instance.AgentStarted)
	waitFor(t, "a re-advertisement after restart", func() bool { return len(g.agent.puts()) > n })
	e.feed(g, "CONNECTED\n")
	e.waitState(g, instance.AgentConnected)
}

func TestRingGarbageChangesNothing(t *testing.T) {
	e := newEnv(t, nil)
	g := e.guest("vm1")
	e.svc.GuestRunning(g.inst, g.ep)
	e.feed(g, "CONNECTED\n")
	e.waitState(g, instance.AgentConnected)
	puts := e.settle(g)
	calls := len(e.insts.calls(g.inst.UUID))
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		chunk := make([]byte, 1+rnd.IntN(64))
		for j := range chunk {
			chunk[j] = byte(rnd.IntN(256))
		}
		switch i % 4 {
		case 1:
			chunk = append(chunk, "\nSTART\n"...) // a partial word
		case 2:
			chunk = append(chunk, "\nconnected\n"...) // wrong case
		case 3:
			chunk = append(chunk, "\nSTARTEDX\n"...)
		}
		g.ring.write(string(chunk))
		e.svc.BackendEvent(g.inst, contract.Event{Kind: contract.EventRingData})
	}
	waitFor(t, "the garbage to be read", g.ring.empty)
	e.quiet(g)
	if st, _ := e.svc.AgentState(g.inst.UUID); st != instance.AgentConnected {
		t.Fatalf("state %q after garbage, want connected", st)
	}
	if got := e.insts.calls(g.inst.UUID); len(got) != calls {
		t.Fatalf("garbage caused %d agent state reports: %+v", len(got)-calls, got[calls:])
	}
	if got := len(g.agent.puts()); got != puts {
		t.Fatalf("garbage caused %d advertisements", got-puts)
	}
}

func TestLostAfterMissedHeartbeats(t *testing.T) {
	e := newEnv(t, nil)
	g := e.guest("vm1")
	e.svc.GuestRunning(g.inst, g.ep)
	e.feed(g, "CONNECTED\n")
	e.waitState(g, instance.AgentConnected)
	// Heartbeats every 5 s keep it connected well past 15 s.
	for range 6 {
		e.clock.advance(5 * time.Second)
		e.feed(g, "CONNECTED\n")
	}
	e.barrier(g)
	if st, _ := e.svc.AgentState(g.inst.UUID); st != instance.AgentConnected {
		t.Fatalf("state %q with regular heartbeats, want connected", st)
	}
	// Two missed periods are not yet lost; three are.
	e.clock.advance(14 * time.Second)
	e.barrier(g) // the monitor checked the heartbeat at the new time
	if st, _ := e.svc.AgentState(g.inst.UUID); st != instance.AgentConnected {
		t.Fatalf("state %q after 14 s without heartbeat, want connected", st)
	}
	e.clock.advance(time.Second)
	e.waitState(g, instance.AgentLost)
	puts := len(g.agent.puts())
	// The agent comes back.
	e.feed(g, "STARTED\n")
	e.waitState(g, instance.AgentStarted)
	waitFor(t, "an advertisement to the returning agent", func() bool { return len(g.agent.puts()) > puts })
	for _, c := range e.insts.calls(g.inst.UUID) {
		if c.st == instance.AgentLost && !c.heartbeat.IsZero() {
			t.Fatalf("lost reported with a heartbeat %v", c.heartbeat)
		}
	}
}

func TestStoppedIsNotLost(t *testing.T) {
	e := newEnv(t, nil)
	g := e.guest("vm1")
	e.svc.GuestRunning(g.inst, g.ep)
	e.feed(g, "STOPPED\n")
	e.waitState(g, instance.AgentStopped)
	e.clock.advance(time.Hour)
	e.barrier(g) // the monitor checked the heartbeat an hour later
	if st, _ := e.svc.AgentState(g.inst.UUID); st != instance.AgentStopped {
		t.Fatalf("state %q, want stopped", st)
	}
}

func TestAdvertisementRateLimit(t *testing.T) {
	const interval = 200 * time.Millisecond
	e := newEnv(t, func(c *Config) { c.AdvertiseInterval = interval })
	g := e.guest("vm1")
	start := time.Now()
	e.svc.GuestRunning(g.inst, g.ep)
	for time.Since(start) < 1200*time.Millisecond {
		e.feed(g, "STARTED\n")
	}
	elapsed := time.Since(start)
	max := int(elapsed/interval) + 1
	if n := len(g.agent.puts()); n > max || n < 2 {
		t.Fatalf("%d advertisements in %v, want 2..%d", n, elapsed, max)
	}
}

func TestDaemonRestartReadvertises(t *testing.T) {
	e := newEnv(t, nil)
	g := e.guest("vm1")
	e.svc.GuestRunning(g.inst, g.ep)
	e.feed(g, "CONNECTED\n")
	e.settle(g)
	e.svc.Close()
	e.host.Close()
	// A new daemon: new link port, same certificates, agent still CONNECTED.
	host2, err := linkhost.New(linkhost.Config{DisableVsock: true})
	if err != nil {
		t.Fatal(err)
	}
	defer host2.Close()
	svc2, err := New(Config{Instances: e.insts, Links: host2, Certs: e.pki, Now: e.clock.now, FastPoll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer svc2.Close()
	before := len(g.agent.puts())
	svc2.GuestRunning(g.inst, g.ep)
	waitFor(t, "the new daemon's advertisement", func() bool { return len(g.agent.puts()) > before })
	if got := g.agent.puts()[before]; got.Port != host2.Port() {
		t.Fatalf("advertised port %d, want the new port %d", got.Port, host2.Port())
	}
	if _, err := os.Stat(hybrid.HostPath(g.ep.Path, host2.Port())); err != nil {
		t.Fatalf("new daemon's hybrid socket: %v", err)
	}
}

func TestDevlxdChangeReadvertises(t *testing.T) {
	e := newEnv(t, nil)
	g := e.guest("vm1")
	e.svc.GuestRunning(g.inst, g.ep)
	e.feed(g, "CONNECTED\n")
	n := e.settle(g)
	inst := e.insts.update(g.inst.UUID, func(i *instance.Instance) { i.Config["security.devlxd"] = "false" })
	e.svc.ConfigChanged(inst, []instance.ConfigChange{{Key: "security.devlxd", Value: "false"}})
	waitFor(t, "a re-advertisement", func() bool { return len(g.agent.puts()) > n })
	if got := g.agent.puts()[n]; got.Devlxd {
		t.Fatalf("advertisement after security.devlxd=false: %+v", got)
	}
	// Not confirmed yet: the next CONNECTED heartbeat confirms it.
	e.settle(g)
}

func TestEventsPushed(t *testing.T) {
	e := newEnv(t, nil)
	g := e.guest("vm1")
	e.svc.GuestRunning(g.inst, g.ep)
	inst := e.insts.update(g.inst.UUID, func(i *instance.Instance) {
		i.Config["user.foo"] = "baz"
		i.Devices = map[string]map[string]string{"eth0": {"type": "nic", "network": "br0"}}
	})
	e.svc.ConfigChanged(inst, []instance.ConfigChange{
		{Key: "user.foo", OldValue: "bar", Value: "baz"},
		{Key: "limits.cpu", OldValue: "1", Value: "2"},
		{Key: "cloud-init.user-data", Value: "x"},
	})
	// Events reach the agent in order: once a last, marker event arrived,
	// nothing else from the changes above is coming.
	e.svc.ConfigChanged(inst, []instance.ConfigChange{{Key: "user.marker", Value: "end"}})
	waitFor(t, "four events", func() bool { return len(g.agent.eventBodies()) >= 4 })
	bodies := g.agent.eventBodies()
	if len(bodies) != 4 || !bytes.Contains(bodies[3], []byte(`"user.marker"`)) {
		t.Fatalf("%d events, want 3 and the marker: %q", len(bodies), bodies)
	}
	bodies = bodies[:3]
	type meta struct {
		Key, OldValue, Value string
		Action, Name         string
		Config               map[string]string
	}
	var got []string
	for _, b := range bodies {
		var ev devlxdapi.Event
		if err := json.Unmarshal(b, &ev); err != nil {
			t.Fatal(err)
		}
		if _, err := time.Parse(time.RFC3339Nano, ev.Timestamp); err != nil {
			t.Fatalf("timestamp %q: %v", ev.Timestamp, err)
		}
		got = append(got, ev.Type+" "+string(ev.Metadata))
	}
	mac := guestview.GeneratedMAC(g.inst.UUID, "eth0")
	want := []string{
		`config {"key":"user.foo","old_value":"bar","value":"baz"}`,
		`device {"action":"removed","name":"root","config":{"path":"/","type":"disk"}}`,
		`device {"action":"added","name":"eth0","config":{"hwaddr":"` + mac + `","network":"br0","type":"nic"}}`,
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("event %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}

func TestGuestResetAndStopped(t *testing.T) {
	e := newEnv(t, nil)
	g := e.guest("vm1")
	e.svc.GuestRunning(g.inst, g.ep)
	e.feed(g, "CONNECTED\n")
	e.waitState(g, instance.AgentConnected)
	e.svc.GuestReset(g.inst)
	e.waitState(g, instance.AgentNone)
	if _, err := os.Stat(hybrid.HostPath(g.ep.Path, e.host.Port())); err != nil {
		t.Fatalf("link closed by a reset: %v", err)
	}
	e.feed(g, "STARTED\n")
	e.waitState(g, instance.AgentStarted)

	m := e.svc.monitor(g.inst.UUID)
	e.svc.GuestStopped(g.inst)
	if _, ok := e.svc.AgentState(g.inst.UUID); ok {
		t.Fatal("still monitored after GuestStopped")
	}
	if _, err := os.Stat(hybrid.HostPath(g.ep.Path, e.host.Port())); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("hybrid socket after GuestStopped: %v", err)
	}
	// Once its goroutines ended (a read in flight may finish), nothing
	// is left that could read the ring again.
	m.wait()
	reads := g.ring.readCount()
	e.svc.BackendEvent(g.inst, contract.Event{UUID: g.inst.UUID, Kind: contract.EventRingData})
	if got := g.ring.readCount(); got != reads {
		t.Fatalf("%d ring reads after GuestStopped", got-reads)
	}
}

func TestGuestFiles(t *testing.T) {
	e := newEnv(t, nil)
	inst := &instance.Instance{Name: "vm9", UUID: "uuid-vm9", Config: map[string]string{"security.devlxd": "false"}}
	files, err := e.svc.GuestFiles(context.Background(), inst)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := e.pki.LoadInstance("vm9")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		mode uint32
		data []byte
	}{
		FileAgentCert:  {0o644, certs.Agent.CertPEM},
		FileAgentKey:   {0o600, certs.Agent.KeyPEM},
		FileServerCert: {0o644, certs.Client.CertPEM},
	}
	if len(files) != 4 {
		t.Fatalf("%d files, want 4", len(files))
	}
	for _, f := range files {
		if f.Path == FileAgentConf {
			ad, err := advert.Parse(f.Data)
			if err != nil {
				t.Fatalf("agent.conf: %v", err)
			}
			if ad.CID != 2 || ad.Port != e.host.Port() || ad.Devlxd || ad.Certificate != string(e.pki.Daemon().CertPEM) {
				t.Fatalf("agent.conf %+v", ad)
			}
			continue
		}
		w, ok := want[f.Path]
		if !ok {
			t.Fatalf("unexpected file %q", f.Path)
		}
		if f.Mode != w.mode || !bytes.Equal(f.Data, w.data) {
			t.Fatalf("%s: mode %o, data equal %v", f.Path, f.Mode, bytes.Equal(f.Data, w.data))
		}
	}
	again, err := e.svc.GuestFiles(context.Background(), inst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again[1].Data, files[1].Data) {
		t.Fatal("GuestFiles generated a new key on the second call")
	}
	if err := e.svc.DeleteInstance(inst); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pki.LoadInstance("vm9"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("key pairs after DeleteInstance: %v", err)
	}
}

// TestNoAgentPollBacksOff checks that a guest whose agent says nothing is
// read less and less often (down to IdlePoll), that backend events still
// read its ring at once, and that the fallback timer alone still finds a
// word.
func TestNoAgentPollBacksOff(t *testing.T) {
	const idle = 200 * time.Millisecond
	e := newEnv(t, func(c *Config) { c.IdlePoll = idle })
	g := e.guest("vm1")
	e.svc.GuestRunning(g.inst, g.ep)
	// 10, 20, 40, 80, 160, 200 ms...: after 8 reads the period is IdlePoll.
	waitFor(t, "8 ring reads", func() bool { return g.ring.readCount() >= 8 })
	t.Run("backed off", func(t *testing.T) {
		// Once a gap of IdlePoll shows, every later timed read comes at
		// least IdlePoll after the one before (timers fire late under load,
		// never early): without the back-off they would come every 10 ms.
		gap := func(ts []time.Time, i int) time.Duration { return ts[i].Sub(ts[i-1]) }
		var from int
		waitFor(t, "a read IdlePoll after the previous one", func() bool {
			ts := g.ring.readTimes()
			for i := max(from, 1); i < len(ts); i++ {
				if gap(ts, i) >= idle {
					from = i
					return true
				}
			}
			from = len(ts)
			return false
		})
		waitFor(t, "3 more timed reads", func() bool { return g.ring.readCount() >= from+4 })
		ts := g.ring.readTimes()
		for i := from + 1; i <= from+3; i++ {
			if d := gap(ts, i); d < idle {
				t.Fatalf("read %d came %v after the one before, want at least IdlePoll %v", i, d, idle)
			}
		}
	})
	t.Run("event reads at once", func(t *testing.T) {
		e.feed(g, "STARTED\n") // feed sends ring-data and waits for the read
		e.waitState(g, instance.AgentStarted)
	})
	t.Run("timer alone finds a word", func(t *testing.T) {
		e.svc.GuestReset(g.inst)
		e.waitState(g, instance.AgentNone)
		base := g.ring.readCount()
		waitFor(t, "the poll to back off", func() bool { return g.ring.readCount() >= base+7 })
		g.ring.write("STARTED\n") // no backend event
		e.waitState(g, instance.AgentStarted)
	})
}

func TestNextPoll(t *testing.T) {
	const fast, mid, slow, idle = 10 * time.Millisecond, 40 * time.Millisecond, 100 * time.Millisecond, 80 * time.Millisecond
	svc := &Service{cfg: Config{FastPoll: fast, StoppedPoll: mid, ConnectedPoll: slow, IdlePoll: idle}}
	tests := []struct {
		name  string
		tr    tracker
		heard []bool
		want  []time.Duration
	}{
		{"no agent backs off to IdlePoll", tracker{}, []bool{false, false, false, false, false},
			[]time.Duration{fast, 2 * fast, 4 * fast, idle, idle}},
		{"anything heard resets", tracker{}, []bool{false, false, true, false},
			[]time.Duration{fast, 2 * fast, fast, 2 * fast}},
		{"started, advertisement not accepted: backs off to StoppedPoll", tracker{state: instance.AgentStarted}, []bool{false, false, false, false},
			[]time.Duration{fast, 2 * fast, mid, mid}},
		{"advertisement accepted, awaiting CONNECTED: stays fast", tracker{state: instance.AgentStarted, advertOK: true}, []bool{false, false, false, false},
			[]time.Duration{fast, fast, fast, fast}},
		{"advertisement accepted, no agent word yet: backs off", tracker{advertOK: true}, []bool{false, false, false, false},
			[]time.Duration{fast, 2 * fast, 4 * fast, idle}},
		{"connected is slow", tracker{state: instance.AgentConnected, confirmed: true}, []bool{false, false},
			[]time.Duration{slow, slow}},
		{"lost is mid", tracker{state: instance.AgentLost}, []bool{false}, []time.Duration{mid}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &monitor{svc: svc, tr: tt.tr}
			for i, heard := range tt.heard {
				if got := m.nextPoll(heard); got != tt.want[i] {
					t.Fatalf("poll %d (heard %v) = %v, want %v", i, heard, got, tt.want[i])
				}
			}
		})
	}
}

// TestWordsDuringAdvertisementAskNoSecond: the words an agent writes while
// the daemon's PUT /1.0 to it is under way (a restarted daemon's
// advertisements wait their turn for seconds; the agent heartbeats
// CONNECTED meanwhile) are coalesced with that PUT: its result decides.
// Tried: the agent holds the first PUT; three CONNECTED heartbeats are
// read meanwhile; once the PUT is answered, a CONNECTED confirms it and
// no second PUT is made (before, each heartbeat asked for one: two PUTs,
// each two TLS handshakes, per guest of a restart).
func TestWordsDuringAdvertisementAskNoSecond(t *testing.T) {
	e := newEnv(t, nil)
	g := e.guest("vm1")
	stall := make(chan struct{})
	g.agent.mu.Lock()
	g.agent.putStall = stall
	g.agent.mu.Unlock()
	e.svc.GuestRunning(g.inst, g.ep)
	waitFor(t, "the PUT /1.0 at GuestRunning", func() bool {
		g.agent.mu.Lock()
		defer g.agent.mu.Unlock()
		return g.agent.putsBegun == 1
	})
	for range 3 {
		e.feed(g, "CONNECTED\n")
	}
	e.barrier(g) // the words' steps are done: whatever they asked for is asked
	close(stall)
	waitFor(t, "the PUT's answer", func() bool { return len(g.agent.puts()) == 1 })
	// The CONNECTED after the answer confirms the advertisement: the
	// heartbeats after it ask for nothing either.
	for range 3 {
		e.feed(g, "CONNECTED\n")
		e.quiet(g)
	}
	g.agent.mu.Lock()
	begun := g.agent.putsBegun
	g.agent.mu.Unlock()
	if begun != 1 {
		t.Fatalf("%d PUT /1.0 for one advertisement, want 1", begun)
	}
	e.waitState(g, instance.AgentConnected)
}
