package daemon_test

// Daemon-level benchmarks: a real guestlinkd process (with the real sim
// plugin, real sim guests and, where the figure is about it, the real agent)
// driven through client over the admin Unix socket. They print the
// figures docs/performance.md records; `make bench` runs them.
//
// The fixtures are expensive (10,000 instances, 1,000 running guests), so
// each benchmark builds its fixture once and its sub-benchmarks measure
// against it; one b.N iteration is one sample. Run them with a fixed count,
// e.g. -benchtime 10x.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/guestlink/guestlink/agent/devlxdclient"
	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/link/devlxdapi"
)

// Fixture sizes; the environment variables shrink them for quick runs.
const (
	benchInstancesEnv = "GUESTLINK_BENCH_INSTANCES" // default 10,000
	benchGuestsEnv    = "GUESTLINK_BENCH_GUESTS"    // default 1,000
)

func benchSize(b *testing.B, env string, def int) int {
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive number", env, v)
	}
	return n
}

// benchSleepCommand is the guest command of guests that run no agent.
const benchSleepCommand = "exec sleep 3600"

// BenchmarkDaemon10k measures the daemon with 10,000 (stopped sim)
// instances: listing them all over the admin socket, its resident memory,
// durable state changes through the API, and cold start (exec until the
// admin socket answers).
func BenchmarkDaemon10k(b *testing.B) {
	benchRaiseNoFile(b)
	n := benchSize(b, benchInstancesEnv, 10000)
	bin := benchBinaries(b)
	d := benchStartDaemon(b, bin, benchNewStateDir(b))
	ctx := context.Background()
	began := time.Now()
	cfg := map[string]string{"sim.command": benchSleepCommand, "user.role": "bench", "user.tier": "web"}
	if err := benchCreate(ctx, d.Client, "i", n, 16, cfg, false); err != nil {
		b.Fatal(err)
	}
	b.Logf("created %d instances in %v", n, time.Since(began).Round(time.Millisecond))

	b.Run("list", func(b *testing.B) {
		var lat benchLatency
		for b.Loop() {
			start := time.Now()
			list, err := d.Client.Instances(ctx, client.InstanceFilter{})
			lat.Add(time.Since(start))
			if err != nil {
				b.Fatal(err)
			}
			if len(list) != n {
				b.Fatalf("listed %d instances, want %d", len(list), n)
			}
		}
		lat.Report(b, "", time.Millisecond)
	})

	// The same request without decoding the answer: what the daemon takes
	// (and the socket carries), apart from the client's JSON decoding.
	b.Run("list-raw", func(b *testing.B) {
		hc := &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var nd net.Dialer
				return nd.DialContext(ctx, "unix", d.Socket)
			},
		}}
		defer hc.CloseIdleConnections()
		var lat, decode benchLatency
		var body []byte
		for b.Loop() {
			start := time.Now()
			resp, err := hc.Get("http://unix/1.0/instances")
			if err != nil {
				b.Fatal(err)
			}
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			lat.Add(time.Since(start))
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Fatalf("GET /1.0/instances: %d, %v", resp.StatusCode, err)
			}
			// What the client does with the answer: one pass over the
			// envelope, the metadata decoded into the list on the way.
			start = time.Now()
			var list []api.Instance
			env := struct {
				Metadata any `json:"metadata"`
			}{Metadata: &list}
			if err := json.Unmarshal(body, &env); err != nil {
				b.Fatal(err)
			}
			decode.Add(time.Since(start))
			if len(list) != n {
				b.Fatalf("decoded %d instances, want %d", len(list), n)
			}
		}
		lat.Report(b, "", time.Millisecond)
		decode.Report(b, "decode-", time.Millisecond)
		b.ReportMetric(float64(len(body))/(1<<20), "body-MiB")
	})

	b.Run("rss", func(b *testing.B) {
		var rss, hwm int64
		for b.Loop() {
			var err error
			if rss, err = benchProcStatus(d.PID(), "VmRSS"); err != nil {
				b.Fatal(err)
			}
			if hwm, err = benchProcStatus(d.PID(), "VmHWM"); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(rss)/1024, "rss-MiB")
		b.ReportMetric(float64(hwm)/1024, "peak-rss-MiB")
	})

	// One iteration is a burst of config changes, 32 at a time over the
	// admin socket; each is answered only after its transaction (instance,
	// timeline entry, event) committed.
	b.Run("state-changes", func(b *testing.B) {
		const burst, conc = 1000, 32
		var total time.Duration
		round := 0
		for b.Loop() {
			round++
			start := time.Now()
			g, gctx := errgroup.WithContext(ctx)
			g.SetLimit(conc)
			for i := range burst {
				g.Go(func() error {
					name := fmt.Sprintf("i-%d", (round*burst+i)%n)
					_, err := d.Client.UpdateConfig(gctx, name, map[string]string{"user.round": strconv.Itoa(round)}, nil)
					return err
				})
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
			total += time.Since(start)
		}
		b.ReportMetric(float64(burst*round)/total.Seconds(), "changes/s")
	})

	b.Run("cold-start", func(b *testing.B) {
		var lat benchLatency
		for b.Loop() {
			took, err := d.Restart()
			if err != nil {
				b.Fatal(err)
			}
			lat.Add(took)
		}
		lat.Report(b, "", time.Millisecond)
		if rss, err := benchProcStatus(d.PID(), "VmRSS"); err == nil {
			b.ReportMetric(float64(rss)/1024, "rss-after-start-MiB")
		}
	})
}

// benchWaitInstance waits until cond holds for the named instance.
func benchWaitInstance(b *testing.B, c *client.Client, name string, what string, cond func(*api.Instance) bool) *api.Instance {
	b.Helper()
	var inst *api.Instance
	var err error
	if !testwait.Until(2*time.Minute, func() bool {
		inst, err = c.Instance(context.Background(), name)
		return err == nil && cond(inst)
	}) {
		b.Fatalf("instance %q: no %s within 2 minutes (last: %+v, err %v)", name, what, inst, err)
	}
	return inst
}

// BenchmarkGuestLinkGet measures GET /1.0 as a guest sees it, with the real
// daemon and real sim guests running the real agent: through the agent's
// /dev/lxd/sock (kept-alive TLS upstream, and the agent's --tls-per-request
// mode), and the same request sent straight to the daemon's devlxd handlers
// on the guest's hybrid link socket with the guest's agent certificate (the
// agent's own request path, without the agent). Each iteration sends one
// request on every path, interleaved, so machine load hits them alike.
func BenchmarkGuestLinkGet(b *testing.B) {
	bin := benchBinaries(b)
	d := benchStartDaemon(b, bin, benchNewStateDir(b))
	ctx := context.Background()
	for name, cmd := range map[string]string{
		"agent":      "",
		"agent-ptls": `exec "$GUESTLINK_AGENT" run --tls-per-request`,
	} {
		cfg := map[string]string{}
		if cmd != "" {
			cfg["sim.command"] = cmd
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		_, err := d.Client.Create(cctx, api.InstancesPost{Name: name, Backend: "sim", Config: cfg, Start: true})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
	connected := func(i *api.Instance) bool { return i.Agent.State == api.AgentConnected }
	reuse := benchWaitInstance(b, d.Client, "agent", "connected agent", connected)
	perReq := benchWaitInstance(b, d.Client, "agent-ptls", "connected agent", connected)

	direct, err := benchNewAgentPlayer("agent", reuse.Details["guest_dir"], false)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()
	directPTLS, err := benchNewAgentPlayer("agent", reuse.Details["guest_dir"], true)
	if err != nil {
		b.Fatal(err)
	}
	defer directPTLS.Close()
	viaAgent := devlxdclient.New(reuse.DevlxdSocket)
	viaAgentPTLS := devlxdclient.New(perReq.DevlxdSocket)

	paths := []struct {
		name string
		lat  benchLatency
		get  func() error
	}{
		{name: "agent", get: func() error { _, err := devlxdclient.Get(ctx, viaAgent, "/1.0"); return err }},
		{name: "agent-tls-per-request", get: func() error { _, err := devlxdclient.Get(ctx, viaAgentPTLS, "/1.0"); return err }},
		{name: "direct", get: func() error { return direct.Get(ctx, "/1.0") }},
		{name: "direct-tls-per-request", get: func() error { return directPTLS.Get(ctx, "/1.0") }},
	}
	// The agent answers /dev/lxd/sock only once it has confirmed the daemon.
	for i := range paths {
		var err error
		if !testwait.Until(time.Minute, func() bool { err = paths[i].get(); return err == nil }) {
			b.Fatalf("warm-up of %s: %v", paths[i].name, err)
		}
	}
	for b.Loop() {
		for i := range paths {
			start := time.Now()
			if err := paths[i].get(); err != nil {
				b.Fatalf("GET /1.0 via %s: %v", paths[i].name, err)
			}
			paths[i].lat.Add(time.Since(start))
		}
	}
	for i := range paths {
		paths[i].lat.Report(b, paths[i].name+"-", time.Microsecond)
	}
	ratio := func(a, c *benchLatency, p float64) float64 {
		return float64(a.Percentile(p)) / float64(c.Percentile(p))
	}
	b.ReportMetric(ratio(&paths[0].lat, &paths[2].lat, 50), "agent/direct-median-x")
	b.ReportMetric(ratio(&paths[0].lat, &paths[2].lat, 99), "agent/direct-p99-x")
	b.ReportMetric(ratio(&paths[1].lat, &paths[0].lat, 50), "tls-per-request/agent-median-x")
}

// benchWaitAction reads evc until a lifecycle event with action for the
// instance arrives, and returns when it was received.
func benchWaitAction(evc <-chan api.Event, errc <-chan error, name, action string) (time.Time, error) {
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for {
		select {
		case ev, ok := <-evc:
			if !ok {
				return time.Time{}, fmt.Errorf("event stream ended: %v", <-errc)
			}
			now := time.Now()
			if ev.Instance != name {
				continue
			}
			if lc, err := ev.Lifecycle(); err == nil && lc.Action == action {
				return now, nil
			}
		case <-timeout.C:
			return time.Time{}, fmt.Errorf("no %s event for %q within a minute", action, name)
		}
	}
}

// BenchmarkAgentStateEvent measures an agent state change as the admin
// event stream shows it: a ring word written into a running sim guest's
// serial port (as the agent writes it) until the matching
// instance-agent-started / instance-agent-stopped event arrives on the
// events websocket. Words alternate so that each one is a change.
func BenchmarkAgentStateEvent(b *testing.B) {
	bin := benchBinaries(b)
	d := benchStartDaemon(b, bin, benchNewStateDir(b))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const name = "words"
	cctx, ccancel := context.WithTimeout(ctx, 2*time.Minute)
	_, err := d.Client.Create(cctx, api.InstancesPost{Name: name, Backend: "sim",
		Config: map[string]string{"sim.command": benchSleepCommand}, Start: true})
	ccancel()
	if err != nil {
		b.Fatal(err)
	}
	inst := benchWaitInstance(b, d.Client, name, "guest directory", func(i *api.Instance) bool { return i.Details["guest_dir"] != "" })
	player, err := benchNewAgentPlayer(name, inst.Details["guest_dir"], false)
	if err != nil {
		b.Fatal(err)
	}
	defer player.Close()
	evc, errc := d.Client.Events(ctx, client.EventFilter{Types: []string{events.TypeLifecycle}, Instances: []string{name}})
	words := []struct{ word, action string }{
		{"STARTED", events.InstanceAgentStarted},
		{"STOPPED", events.InstanceAgentStopped},
	}
	var lat benchLatency
	i := 0
	for b.Loop() {
		w := words[i%2]
		i++
		start := time.Now()
		if err := player.WriteWord(w.word); err != nil {
			b.Fatal(err)
		}
		got, err := benchWaitAction(evc, errc, name, w.action)
		if err != nil {
			b.Fatal(err)
		}
		lat.Add(got.Sub(start))
	}
	lat.Report(b, "", time.Millisecond)
}

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
