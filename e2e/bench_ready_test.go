package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/link/devlxdapi"
)

// The Ready benchmark: 1,000 running sim guests, the time from start to
// Ready, and the idle CPU of the daemon while they run.

// BenchmarkReady1000 measures PATCH /1.0 {"state":"Ready"} to the
// instance-ready event on the admin stream with 1,000 running sim guests.
// The guests run `sleep` (real VMM processes of the real plugin); the
// benchmark plays their agents (benchAgentPlayer): per guest, its agent
// certificate and link port from the config drive, TLS on the daemon's
// hybrid socket for that guest, the agent's envelope form. It also reports
// the CPU the daemon and the plugin use while the guests are idle, per
// guest.
func BenchmarkReady1000(b *testing.B) {
	benchRaiseNoFile(b)
	n := benchSize(b, benchGuestsEnv, 1000)
	// Each sim VMM takes an inotify instance for its port open/close events
	// while the per-user limit (fs.inotify.max_user_instances, default 128)
	// allows; the others run without them (ring-data events still flow).
	bin := benchBinaries(b)
	d := benchStartDaemon(b, bin, benchNewStateDir(b))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	began := time.Now()
	if err := benchCreate(ctx, d.Client, "g", n, 8, map[string]string{"sim.command": benchSleepCommand}, true); err != nil {
		b.Fatal(err)
	}
	b.Logf("started %d guests in %v", n, time.Since(began).Round(time.Millisecond))
	list, err := d.Client.Instances(ctx, client.InstanceFilter{Status: "Running"})
	if err != nil {
		b.Fatal(err)
	}
	if len(list) != n {
		b.Fatalf("%d instances running, want %d", len(list), n)
	}
	players := make([]*benchAgentPlayer, 0, n)
	for _, inst := range list {
		p, err := benchNewAgentPlayer(inst.Name, inst.Details["guest_dir"], false)
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		players = append(players, p)
	}

	// Idle guests whose agent never started: the agent monitor's poll of
	// each ring has backed off to agentmon.DefaultIdlePoll, waiting for an
	// agent (ring-data events would wake it at once).
	b.Run("idle-cpu-no-agent", func(b *testing.B) { benchIdleCPU(b, d, n) })

	// Idle guests with a connected agent (played: STARTED, the
	// advertisement answered, CONNECTED, then a CONNECTED heartbeat every
	// 5 s), as in production.
	for _, p := range players {
		if err := p.Connect(5 * time.Second); err != nil {
			b.Fatal(err)
		}
	}
	var connected int
	if !testwait.Until(3*time.Minute, func() bool {
		conn, err := d.Client.Instances(ctx, client.InstanceFilter{Agent: string(api.AgentConnected)})
		if err != nil {
			b.Fatal(err)
		}
		connected = len(conn)
		return connected == n
	}) {
		b.Fatalf("%d of %d agents connected after 3 minutes", connected, n)
	}
	// The measurement is of the steady state: the monitors confirm the
	// advertisements at the next heartbeat (5 s), which nothing announces.
	time.Sleep(6 * time.Second)
	b.Run("idle-cpu-connected", func(b *testing.B) { benchIdleCPU(b, d, n) })

	evc, errc := d.Client.Events(ctx, client.EventFilter{Types: []string{events.TypeLifecycle}})
	// Drain anything queued before measuring.
	drain := func() {
		for {
			select {
			case <-evc:
			case <-time.After(200 * time.Millisecond):
				return
			}
		}
	}

	// One iteration: every guest in turn declares Ready and the next one
	// waits for the previous one's event.
	b.Run("sequential", func(b *testing.B) {
		drain()
		var lat benchLatency
		for b.Loop() {
			for _, p := range players {
				start := time.Now()
				if err := p.SetState(ctx, devlxdapi.StateReady); err != nil {
					b.Fatal(err)
				}
				got, err := benchWaitAction(evc, errc, p.Name, events.InstanceReady)
				if err != nil {
					b.Fatal(err)
				}
				lat.Add(got.Sub(start))
			}
		}
		lat.Report(b, "", time.Millisecond)
	})

	// One iteration: every guest declares Ready at once (64 in flight), as
	// after a host reboot; each guest's latency counts.
	b.Run("burst", func(b *testing.B) {
		drain()
		var lat benchLatency
		for b.Loop() {
			var mu sync.Mutex
			sent := make(map[string]time.Time, len(players))
			done := make(chan error, 1)
			go func() {
				for left := len(players); left > 0; {
					select {
					case ev, ok := <-evc:
						if !ok {
							done <- fmt.Errorf("event stream ended: %v", <-errc)
							return
						}
						now := time.Now()
						lc, err := ev.Lifecycle()
						if err != nil || lc.Action != events.InstanceReady {
							continue
						}
						mu.Lock()
						t, ok := sent[ev.Instance]
						delete(sent, ev.Instance)
						mu.Unlock()
						if ok {
							lat.Add(now.Sub(t))
							left--
						}
					case <-time.After(2 * time.Minute):
						done <- fmt.Errorf("instance-ready events missing after 2 minutes")
						return
					}
				}
				done <- nil
			}()
			g, gctx := errgroup.WithContext(ctx)
			g.SetLimit(64)
			for _, p := range players {
				g.Go(func() error {
					mu.Lock()
					sent[p.Name] = time.Now()
					mu.Unlock()
					return p.SetState(gctx, devlxdapi.StateReady)
				})
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
		lat.Report(b, "", time.Millisecond)
	})
	cancel()
	d.Stop()
}

// benchIdleCPU reports the CPU used over 10 s windows while n guests idle:
// by the daemon, by its plugin processes and by the guests' VMMs (the
// plugin's children), in percent of one core, and all of it per guest.
func benchIdleCPU(b *testing.B, d *benchDaemon, n int) {
	const window = 10 * time.Second
	plugins := benchChildren(d.PID())
	var vmms []int
	for _, p := range plugins {
		vmms = append(vmms, benchChildren(p)...)
	}
	cpu := func(pids []int) time.Duration {
		var sum time.Duration
		for _, pid := range pids {
			if t, err := benchCPUTime(pid); err == nil { // a VMM may end
				sum += t
			}
		}
		return sum
	}
	groups := [][]int{{d.PID()}, plugins, vmms}
	used := make([]time.Duration, len(groups))
	var wall time.Duration
	for b.Loop() {
		before := make([]time.Duration, len(groups))
		for i, g := range groups {
			before[i] = cpu(g)
		}
		t0 := time.Now()
		time.Sleep(window) // the measurement itself: CPU used over an idle window
		for i, g := range groups {
			used[i] += cpu(g) - before[i]
		}
		wall += time.Since(t0)
	}
	pct := func(t time.Duration) float64 { return 100 * t.Seconds() / wall.Seconds() }
	b.ReportMetric(pct(used[0]), "daemon-cpu-%")
	b.ReportMetric(pct(used[1]), "plugin-cpu-%")
	b.ReportMetric(pct(used[2]), "vmms-cpu-%")
	b.ReportMetric(1e3*(used[0]+used[1]+used[2]).Seconds()/wall.Seconds()/float64(n), "cpu-ms/s-per-guest")
}
