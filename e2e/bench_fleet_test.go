package e2e

// BenchmarkFleet: issue 14's scale targets with 10,000 fleet guests (one
// fleet host process, the real agent per guest) on one daemon. Run by
// make bench-fleet; FLEET_N=... runs it smaller.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"golang.org/x/sync/errgroup"

	"github.com/guestlink/guestlink/agent/devlxdclient"
	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/link/devlxdapi"
)

const (
	// fleetNEnv sizes the fleet (default 10,000).
	fleetNEnv = "FLEET_N"
	// fleetProfilesEnv is where the pprof top-lists go (unset: nowhere).
	fleetProfilesEnv = "FLEET_PROFILES"
	// fleetProfilesRawEnv, when set, keeps the raw profiles there too
	// (fleet-<phase>-<kind>.pb.gz), for pprof's other views.
	fleetProfilesRawEnv = "FLEET_PROFILES_RAW"
	// fleetIdleSettleEnv is how long the idle phase waits after the last
	// agent connected before it profiles the launch's aftermath and then
	// waits for the daemon's CPU to settle (fleetIdleSettle) before it
	// measures (a Go duration; default 10s).
	fleetIdleSettleEnv = "FLEET_IDLE_SETTLE"
	// fleetSettleWindow and fleetSettleMax bound the wait for the daemon's
	// idle CPU to settle before the idle window (fleetIdleSettle).
	fleetSettleWindow = 5 * time.Second
	fleetSettleMax    = 2 * time.Minute
	// fleetStreams is how many dashboard live streams watch the storm, of
	// which fleetListStreams on the instances list's first page and the
	// others on single instance pages (spread over the fleet), each opened
	// as its page opens it (sse-connect: its view=).
	fleetStreams     = 50
	fleetListStreams = 40
)

// fleetTarget is one line of the verdict: "TARGET <name> <value> <goal>
// met|missed", the goal as "<=250" in the unit the name ends with (-us,
// -ms, -s, -mb) or names.
type fleetTarget struct {
	name  string
	value float64
	goal  string
	met   bool
}

func BenchmarkFleet(b *testing.B) {
	n := benchSize(b, fleetNEnv, 10000)
	fleetRaiseNoFile(b, uint64(8*n+4096))
	benchRaiseNoFile(b)
	bin := benchBinaries(b)
	if _, err := os.Stat(filepath.Join(bin, "plugins", "fleet")); err != nil {
		b.Fatalf("no fleet plugin in %s (run make build): %v", bin, err)
	}
	pprofAddr := freeLoopbackAddr(b)
	b.Setenv("GUESTLINK_DEBUG_PPROF", pprofAddr)
	stateDir := benchNewStateDir(b)
	d := benchStartDaemon(b, bin, stateDir, "--http", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var targets []fleetTarget
	// The verdict, also of the targets measured before a failure (a
	// target not reached is not printed: the failure says why).
	defer func() {
		fmt.Printf("fleet of %d guests\n", n)
		for _, t := range targets {
			verdict := "missed"
			if t.met {
				verdict = "met"
			}
			fmt.Printf("TARGET %s %.2f %s %s\n", t.name, t.value, t.goal, verdict)
		}
	}()
	target := func(name string, value float64, goal string, met bool) {
		targets = append(targets, fleetTarget{name, value, goal, met})
		b.ReportMetric(value, name)
	}

	// Launch.
	began := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(48) // creates wait on the store: more in flight fill its group commits
	for i := range n {
		g.Go(func() error {
			name := "f-" + strconv.Itoa(i)
			_, err := d.Client.Create(gctx, api.InstancesPost{Name: name, Backend: "fleet", Start: true})
			if err != nil {
				return fmt.Errorf("creating %s: %w", name, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	fleetLogf("launched %d fleet guests in %v", n, time.Since(began).Round(time.Millisecond))
	list := fleetWait(ctx, b, d, "agents connected", 20*time.Minute, fleetConnected(n))
	connectedIn := time.Since(began)
	target("all-agents-connected", float64(len(list)), fmt.Sprintf("=%d", n), true)
	fleetLogf("all %d agents connected %v after the first launch", n, connectedIn.Round(time.Millisecond))

	// Idle: every agent heartbeating (5 s); the steady state after the
	// monitors confirmed the advertisements at the next heartbeat.
	settle := 10 * time.Second
	if v := os.Getenv(fleetIdleSettleEnv); v != "" {
		var err error
		if settle, err = time.ParseDuration(v); err != nil {
			b.Fatalf("%s: %v", fleetIdleSettleEnv, err)
		}
	}
	time.Sleep(settle)
	// What the daemon still does after the launch (the aftermath's profile),
	// then 5 s windows of its CPU until two in a row agree: the idle window
	// starts once the daemon's CPU settled, or after fleetSettleMax.
	fleetProfile(b, pprofAddr, "aftermath")
	waited, series, settled, err := fleetIdleSettle(d.PID(), fleetSettleWindow, fleetSettleMax)
	if err != nil {
		b.Fatal(err)
	}
	fleetLogf("idle: waited %v more for the daemon's CPU to settle (settled: %v; %% of a core per 5 s window: %s)",
		waited, settled, series)
	refreshesBefore := fleetReportRefreshes(pprofAddr)
	cpuBefore, err := benchCPUTime(d.PID())
	if err != nil {
		b.Fatal(err)
	}
	const window = 10 * time.Second
	time.Sleep(window)
	cpuAfter, err := benchCPUTime(d.PID())
	if err != nil {
		b.Fatal(err)
	}
	// Whether the agents' report refreshes (core/agentmon, reports.go)
	// still ran while idle was measured: a steady refresh rate settles
	// like idle CPU does, so the settle wait alone cannot tell.
	refreshesAfter := fleetReportRefreshes(pprofAddr)
	fleetLogf("idle: agents' report refreshes at the window's start: %s; at its end: %s (pending: %v)",
		refreshesBefore, refreshesAfter, refreshesBefore.pending() || refreshesAfter.pending())
	idle := 100 * float64(cpuAfter-cpuBefore) / float64(window)
	target("daemon-idle-cpu", idle, "<=5%core", idle <= 5)
	// The same as a cost: daemon CPU µs per idle guest per second.
	perGuest := float64((cpuAfter - cpuBefore).Microseconds()) / window.Seconds() / float64(n)
	// The daemon's idle CPU per wall second (measured again with the live
	// streams open, before the storm).
	idleRate := time.Duration(float64(cpuAfter-cpuBefore) / window.Seconds())
	fleetLogf("idle: daemon CPU %v per second", idleRate.Round(time.Microsecond))
	target("daemon-idle-cpu-per-guest-us-per-s", perGuest, "<=3", perGuest <= 3)
	fleetProfile(b, pprofAddr, "idle")
	rss, err := benchProcStatus(d.PID(), "VmRSS")
	if err != nil {
		b.Fatal(err)
	}
	target("daemon-rss-idle", float64(rss)/1024, "<=300MB", float64(rss)/1024 <= 300)
	fleetCosts(b, d, stateDir, n)

	// GET /1.0/instances (the admin socket): the full objects decoded,
	// as Instances asks, then the CLI table's summary form.
	// The daemon's CPU per list of each form (10 ms ticks, summed over
	// the 7 lists) says what the daemon pays; the wall time is also the
	// client's decode and the machine's load.
	var listLat, sumLat benchLatency
	var listCPU, sumCPU time.Duration
	daemonCPU := func() time.Duration { c, _ := benchCPUTime(d.PID()); return c }
	for range 7 {
		t0, c0 := time.Now(), daemonCPU()
		l, err := d.Client.Instances(ctx, client.InstanceFilter{})
		if err != nil || len(l) != n {
			b.Fatalf("listing: %d instances, %v", len(l), err)
		}
		listLat.Add(time.Since(t0))
		listCPU += daemonCPU() - c0
		t0, c0 = time.Now(), daemonCPU()
		l, err = d.Client.InstanceSummaries(ctx, client.InstanceFilter{}, "name", "status", "backend", "agent", "link", "boot", "started_at", "location")
		if err != nil || len(l) != n {
			b.Fatalf("listing summaries: %d instances, %v", len(l), err)
		}
		sumLat.Add(time.Since(t0))
		sumCPU += daemonCPU() - c0
	}
	fleetLogf("list: daemon CPU per list (7 each, heartbeats beside them): full %.1f ms, summary %.1f ms",
		float64(listCPU.Microseconds())/7000, float64(sumCPU.Microseconds())/7000)
	lm := float64(listLat.Percentile(50)) / float64(time.Millisecond)
	target("list-instances-median", lm, "<=100ms", lm <= 100)
	target("list-10k-ms", lm, "<=60", lm <= 60)
	sm := float64(sumLat.Percentile(50)) / float64(time.Millisecond)
	target("list-10k-summary-ms", sm, "<=10", sm <= 10)

	// The dashboard: a logged-in session, its instances page and 50 live
	// streams.
	dash := fleetDashboard(ctx, b, bin, stateDir)
	var pageLat benchLatency
	for range 7 {
		t0 := time.Now()
		if err := dash.get(ctx, "/instances"); err != nil {
			b.Fatal(err)
		}
		pageLat.Add(time.Since(t0))
	}
	pm := float64(pageLat.Percentile(50)) / float64(time.Millisecond)
	target("dashboard-instances-page-median", pm, "<=100ms", pm <= 100)
	streams := make([]*fleetStream, fleetStreams)
	for i := range streams {
		page := "/instances"
		if i >= fleetListStreams {
			page = "/instances/" + list[(i-fleetListStreams)*n/(fleetStreams-fleetListStreams)].Name
		}
		s, err := dash.stream(ctx, page)
		if err != nil {
			b.Fatal(err)
		}
		streams[i] = s
	}
	fleetLogf("live streams: %d on the instances list's first page (%d rows), %d on single instance pages, each opened as its page opens it (%s)",
		fleetListStreams, len(streams[0].shows), fleetStreams-fleetListStreams, streams[0].url)

	// The Ready storm: every guest's userland declares Ready on its devlxd
	// socket, spread over 1 s.
	evc, errc := d.Client.Events(ctx, client.EventFilter{Types: []string{events.TypeLifecycle}})
	time.Sleep(time.Second) // the subscription is live before the storm (nothing announces it)
	// The daemon's idle rate as the storm begins (every guest idle, the 50
	// live streams and the event subscription open: their heartbeats and
	// session checks are idle work too), taken off the storm's figure for
	// its idle-corrected line.
	preStorm := fleetCPUNow(d, stateDir)
	time.Sleep(5 * time.Second)
	idleRate = time.Duration(float64(fleetCPUNow(d, stateDir).daemon-preStorm.daemon) / 5)
	var mu sync.Mutex
	sent := make(map[string]time.Time, n)
	type delivered struct {
		id   int64
		name string
		at   time.Time
	}
	got := make(chan []delivered, 1)
	// want is how many instance-ready events to wait for: n, less the
	// declarations refused to the end (known once the storm is over).
	var want atomic.Int64
	want.Store(int64(n))
	go func() {
		var out []delivered
		timeout := time.NewTimer(5 * time.Minute)
		defer timeout.Stop()
		recheck := time.NewTicker(time.Second)
		defer recheck.Stop()
		for int64(len(out)) < want.Load() {
			select {
			case <-recheck.C:
			case ev, ok := <-evc:
				if !ok {
					b.Errorf("event stream ended: %v", <-errc)
					got <- out
					return
				}
				now := time.Now()
				if lc, err := ev.Lifecycle(); err == nil && lc.Action == events.InstanceReady {
					out = append(out, delivered{ev.ID, ev.Instance, now})
				}
			case <-timeout.C:
				got <- out
				return
			}
		}
		got <- out
	}()
	profDone := make(chan struct{})
	go func() {
		defer close(profDone)
		fleetProfile(b, pprofAddr, "storm")
	}()
	// The daemon's descriptors during the storm (its link budget is its
	// open-file limit less a tenth): the peak is logged.
	fdPeak := make(chan int, 1)
	fdCtx, fdStop := context.WithCancel(ctx)
	go func() {
		peak := 0
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.PID()))
			peak = max(peak, len(ents))
			select {
			case <-fdCtx.Done():
				fdPeak <- peak
				return
			case <-t.C:
			}
		}
	}()
	var refused atomic.Int64 // guests whose declaration was refused 30 times
	stormCPU := fleetCPUNow(d, stateDir)
	stormStart := time.Now()
	go fleetGoroutines(b, pprofAddr, "storm", 3*time.Second)
	sg, sctx := errgroup.WithContext(ctx)
	for i, inst := range list {
		sock := filepath.Join(inst.Details["guest_dir"], "rootfs", "dev", "lxd", "sock")
		sg.Go(func() error {
			if !sleepCtx(sctx, time.Duration(i)*time.Second/time.Duration(n)) {
				return sctx.Err()
			}
			c := devlxdclient.New(sock)
			defer c.CloseIdleConnections()
			mu.Lock()
			sent[inst.Name] = time.Now()
			mu.Unlock()
			// A guest's userland retries a declaration the overloaded
			// agent or daemon refused (408/503); the latency counts from
			// the first attempt.
			var err error
			for attempt := 0; attempt < 30; attempt++ {
				if err = devlxdclient.Declare(sctx, c, devlxdapi.StateReady); err == nil {
					return nil
				}
				if !sleepCtx(sctx, time.Second) {
					return sctx.Err()
				}
			}
			// Counted and reported (the storm's targets are then missed);
			// the run goes on to the restart.
			if refused.Add(1) == 1 {
				fleetLogf("storm: declaring %s Ready refused 30 times: %v", inst.Name, err)
			}
			return nil
		})
	}
	err = sg.Wait()
	fdStop()
	fleetLogf("storm: the daemon held at most %d descriptors", <-fdPeak)
	if err != nil {
		b.Fatal(err)
	}
	want.Store(int64(n) - refused.Load())
	if r := refused.Load(); r > 0 {
		fleetLogf("storm: %d of %d declarations refused 30 times (a second apart)", r, n)
	}
	declaredIn := time.Since(stormStart)
	fleetCPUNow(d, stateDir).since("storm declarations", stormCPU)
	evs := <-got
	stormEnd := fleetCPUNow(d, stateDir)
	stormEnd.since("storm until every event", stormCPU)
	// The daemon's CPU from the storm's first declaration until its last
	// event, per declaration (the storm's other work included: events,
	// live streams, GC, and the idle work of every guest over the storm's
	// wall time, which on a loaded machine is most of it).
	if len(evs) > 0 {
		stormDaemon := stormEnd.daemon - stormCPU.daemon
		perDecl := float64(stormDaemon.Microseconds()) / float64(len(evs))
		target("daemon-cpu-per-declaration-us", perDecl, "<=250", perDecl <= 250)
		// The same less the idle rate before the storm (live streams
		// open) over the storm's wall time:
		// the declarations' own cost (an extra line; no target of its
		// own, it shows what the one above is made of).
		wall := stormEnd.at.Sub(stormCPU.at)
		idleShare := time.Duration(float64(idleRate) * wall.Seconds())
		own := float64((stormDaemon - idleShare).Microseconds()) / float64(len(evs))
		fleetLogf("storm: daemon CPU %v over %v, of which the idle rate before it (%v/s, live streams open) %v: %.0f µs per declaration less idle",
			stormDaemon.Round(time.Millisecond), wall.Round(time.Millisecond), idleRate.Round(time.Microsecond), idleShare.Round(time.Millisecond), own)
		target("daemon-cpu-per-declaration-idle-corrected-us", own, "<=250", own <= 250)
	}
	var lastEvent time.Time
	var readyLat benchLatency
	for _, e := range evs {
		readyLat.Add(e.at.Sub(sent[e.name]))
		if e.at.After(lastEvent) {
			lastEvent = e.at
		}
	}
	fleetLogf("storm: %d Ready declared in %v, %d instance-ready events", n, declaredIn.Round(time.Millisecond), len(evs))
	target("storm-ready-events", float64(len(evs)), fmt.Sprintf("=%d", n), len(evs) == n)
	all := lastEvent.Sub(stormStart).Seconds()
	target("storm-all-events-delivered", all, "<=10s", len(evs) == n && all <= 10)
	p99 := float64(readyLat.Percentile(99)) / float64(time.Millisecond)
	target("storm-ready-to-event-p99", p99, "<=1000ms", p99 <= 1000)
	// The live streams: each instance-ready event's id in each stream
	// whose page shows the instance.
	var sseLat benchLatency
	missing, reconnects, expected := 0, 0, 0
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range streams {
		for _, e := range evs {
			if !s.shows[e.name] {
				continue
			}
			expected++
			at, ok := s.waitID(e.id, deadline)
			if !ok {
				missing++
				continue
			}
			sseLat.Add(at.Sub(sent[e.name]))
		}
		s.close()
		s.mu.Lock()
		reconnects += s.reconnects
		s.mu.Unlock()
	}
	sp99 := float64(sseLat.Percentile(99)) / float64(time.Millisecond)
	target("storm-ready-to-sse-p99", sp99, "<=200ms", missing == 0 && sp99 <= 200)
	// Every Ready event in every live stream, none resumed by a replay
	// from the store: deliveries missing plus streams the daemon dropped.
	target("stream-ready-missed-or-replayed", float64(missing+reconnects), "=0", missing+reconnects == 0)
	fleetLogf("live streams: %d deliveries expected (the Ready events each stream's page shows), %d missing, %d reconnects after the daemon dropped a stream", expected, missing, reconnects)
	fleetLogWarnings(d)
	<-profDone
	if rss, err := benchProcStatus(d.PID(), "VmRSS"); err == nil {
		target("daemon-rss-after-storm", float64(rss)/1024, "<=300MB", float64(rss)/1024 <= 300)
		target("rss-after-storm-mb", float64(rss)/1024, "<=400", float64(rss)/1024 <= 400)
	}

	// A daemon restart with every guest running: every Ready flag set
	// before it must be back after it.
	before, err := d.Client.Instances(ctx, client.InstanceFilter{Backend: "fleet"})
	if err != nil {
		b.Fatal(err)
	}
	readyBefore := 0
	for _, inst := range before {
		if inst.Ready() {
			readyBefore++
		}
	}
	restartCPU := fleetCPUNow(d, stateDir)
	restartAt := time.Now()
	stopping := make(chan struct{})
	stopProf := make(chan struct{})
	go func() {
		// Where a slow stop waits: the goroutines 3 s into it, if the
		// daemon still runs then (and not once the new one answers).
		defer close(stopProf)
		select {
		case <-stopping:
		case <-time.After(3 * time.Second):
			fleetStacks(pprofAddr, "stop")
			fleetGoroutines(b, pprofAddr, "stop", 0)
		}
	}()
	d.Stop()
	stopTook := time.Since(restartAt)
	close(stopping)
	<-stopProf
	fleetLogf("restart: the daemon stopped in %v", stopTook.Round(time.Millisecond))
	// The stop's own line names its slow steps; the daemon logs it as a
	// warning when the stop took 2 s or more (it runs at warn here).
	if line := fleetStopLine(d); line != "" {
		fleetLogf("restart: the daemon's log: %s", line)
	}
	target("daemon-stop-s", stopTook.Seconds(), "<=2", stopTook <= 2*time.Second)
	restartProf := make(chan struct{})
	// The dumps end with the restart (dumpCtx) and are waited for after
	// restartProf.
	dumpCtx, dumpCancel := context.WithCancel(ctx)
	defer dumpCancel()
	var dumps sync.WaitGroup
	go func() {
		// From the moment the new daemon serves its profiler: its start
		// (recovering every guest) is part of the restart.
		defer close(restartProf)
		for !sleepCtx(ctx, 20*time.Millisecond) || !fleetProfilerUp(pprofAddr) {
			if ctx.Err() != nil {
				return
			}
		}
		// Where the restart waits, at several points of it (the plugins
		// starting, the recovery, the advertisements, the tail): each
		// dump's top-list (fleet-restart-<at>-goroutines.txt) and its
		// goroutines by stack (fleet-restart-<at>-goroutine-stacks.txt).
		began := time.Now()
		for _, at := range []time.Duration{2 * time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second} {
			dumps.Go(func() {
				if !sleepCtx(dumpCtx, at-time.Since(began)) {
					return
				}
				phase := fmt.Sprintf("restart-%ds", int(at.Seconds()))
				fleetStacks(pprofAddr, phase)
				fleetGoroutines(b, pprofAddr, phase, 0)
			})
		}
		fleetProfile(b, pprofAddr, "restart")
	}()
	execAt := time.Now()
	up, err := d.Start()
	if err != nil {
		b.Fatal(err)
	}
	// The admin API answers during the recovery: the new daemon's first
	// answer to GET /1.0 comes while it still recovers guests (or after a
	// recovery that took no longer than 1 s). The figure is exec -> that
	// first answer.
	info, err := d.Client.ServerInfo(ctx)
	if err != nil {
		b.Fatal(err)
	}
	fleetLogf("restart: the first GET /1.0 says %d instances are being recovered", info.Environment.Recovering)
	target("admin-api-silent-s", up.Seconds(), "=0(answers-while-recovering)", info.Environment.Recovering > 0 || up <= time.Second)
	fleetLogf("restart: the daemon answered %v after it was stopped (%v to start)", time.Since(restartAt).Round(time.Millisecond), up.Round(time.Millisecond))
	list = fleetWait(ctx, b, d, "restart", 10*time.Minute, fleetRestarted(restartAt, n, readyBefore))
	rs := time.Since(restartAt).Seconds()
	rx := time.Since(execAt).Seconds()
	dumpCancel()
	<-restartProf
	dumps.Wait()
	var reconnected benchLatency
	for _, inst := range list {
		reconnected.Add(inst.Agent.Since.Sub(restartAt))
	}
	fleetLogf("restart: agents reconnected after p10 %v, p50 %v, p90 %v, max %v", reconnected.Percentile(10).Round(time.Millisecond),
		reconnected.Percentile(50).Round(time.Millisecond), reconnected.Percentile(90).Round(time.Millisecond), reconnected.Percentile(100).Round(time.Millisecond))
	// The restarted daemon's CPU counts from its start (a new process).
	restartCPU.daemon = 0
	fleetCPUNow(d, stateDir).since("restart", restartCPU)
	target("restart-all-connected-ready", rs, "<=30s", rs <= 30)
	// The figure: from the new daemon's exec until the list
	// showed every agent reconnected and every Ready flag back (an upper
	// bound: the list is polled every 2 s).
	target("restart-s", rx, "<=20", rx <= 20)

	cancel()
	d.Stop()
}

// fleetWait lists the fleet (every 2 s) until cond holds.
func fleetWait(ctx context.Context, b *testing.B, d *benchDaemon, phase string, within time.Duration, cond func([]api.Instance) (bool, string)) []api.Instance {
	b.Helper()
	deadline := time.Now().Add(within)
	last := ""
	for {
		lctx, cancel := context.WithTimeout(ctx, time.Minute)
		list, err := d.Client.Instances(lctx, client.InstanceFilter{Backend: "fleet"})
		cancel()
		if err == nil {
			ok, why := cond(list)
			if ok {
				return list
			}
			last = why
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: not reached within %v: %s", phase, within, last)
		}
		time.Sleep(2 * time.Second) // a list of 10,000 costs the daemon: poll slowly
	}
}

// fleetCosts logs what the fleet costs: descriptors of the daemon and of
// the fleet hosts (one per shard) per guest, the hosts' RSS and CPU.
func fleetCosts(b *testing.B, d *benchDaemon, stateDir string, n int) {
	fds := func(pid int) int {
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		return len(ents)
	}
	fleetLogf("daemon: %d open descriptors (%.1f per guest)", fds(d.PID()), float64(fds(d.PID()))/float64(n))
	pids := fleetHostPIDs(stateDir)
	if len(pids) == 0 {
		fleetLogf("no fleet host pid under %s", stateDir)
		return
	}
	var rss int64
	var c0 time.Duration
	totalFDs := 0
	for _, pid := range pids {
		r, _ := benchProcStatus(pid, "VmRSS")
		c, _ := benchCPUTime(pid)
		rss += int64(r)
		c0 += c
		totalFDs += fds(pid)
		fleetLogf("fleet host %d: %d open descriptors, RSS %d MB", pid, fds(pid), r/1024)
	}
	time.Sleep(10 * time.Second)
	var c1 time.Duration
	for _, pid := range pids {
		c, _ := benchCPUTime(pid)
		c1 += c
	}
	fleetLogf("fleet hosts (%d): %d open descriptors (%.1f per guest), RSS %d MB (%.0f KB per guest), CPU %.1f %%core idle",
		len(pids), totalFDs, float64(totalFDs)/float64(n), rss/1024, float64(rss)/float64(n), 100*float64(c1-c0)/float64(10*time.Second))
}

// fleetLogf prints a line of the run's log to stdout: a benchmark's b.Logf
// keeps only its first lines.
func fleetLogf(format string, args ...any) {
	fmt.Printf("%s fleet: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// fleetStopLine returns the daemon log's last "guestlinkd stopped" line,
// or "" (a stop under 2 s is logged at info, below the bench's level).
func fleetStopLine(d *benchDaemon) string {
	data, err := os.ReadFile(filepath.Join(d.StateDir, "guestlinkd.log"))
	if err != nil {
		return ""
	}
	last := ""
	for line := range strings.Lines(string(data)) {
		if strings.Contains(line, "guestlinkd stopped") {
			last = strings.TrimSpace(line)
		}
	}
	return last
}

// fleetStacks saves the daemon's goroutines by stack, counted
// (fleet-<phase>-goroutine-stacks.txt): where a slow phase waits, which the
// top-list of fleetGoroutines hides below its cut.
func fleetStacks(addr, phase string) {
	dir := os.Getenv(fleetProfilesEnv)
	if dir == "" {
		return
	}
	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		fleetLogf("goroutine stacks: %v", err)
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		fleetLogf("goroutine stacks: %v", err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, "fleet-"+phase+"-goroutine-stacks.txt"), data, 0o644); err != nil {
		fleetLogf("goroutine stacks: %v", err)
	}
}

// fleetLogWarnings logs how often the daemon's log says an event subscriber
// fell behind (a live stream or a bus subscriber dropped, then resumed by
// replay from the store).
func fleetLogWarnings(d *benchDaemon) {
	data, err := os.ReadFile(filepath.Join(d.StateDir, "guestlinkd.log"))
	if err != nil {
		return
	}
	for _, w := range []string{"fell behind", "live event subscription ended", "stream full", "TLS handshake"} {
		if n := strings.Count(string(data), w); n > 0 {
			fleetLogf("daemon log: %d lines with %q", n, w)
		}
	}
}

// fleetHostPIDs returns the pids of the fleet's host processes (one per
// shard).
func fleetHostPIDs(stateDir string) []int {
	dir := filepath.Join(stateDir, "plugins", "fleet")
	pidFiles, _ := filepath.Glob(filepath.Join(dir, "s*", "host.pid"))
	pidFiles = append([]string{filepath.Join(dir, "host.pid")}, pidFiles...)
	var pids []int
	for _, f := range pidFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// fleetCPU is the CPU time used so far by the daemon, the fleet hosts and
// this process (the guests' userland in the storm, the streams' readers).
type fleetCPU struct {
	at                    time.Time
	daemon, hosts, itself time.Duration
}

func fleetCPUNow(d *benchDaemon, stateDir string) fleetCPU {
	c := fleetCPU{at: time.Now()}
	c.daemon, _ = benchCPUTime(d.PID())
	for _, pid := range fleetHostPIDs(stateDir) {
		h, _ := benchCPUTime(pid)
		c.hosts += h
	}
	c.itself, _ = benchCPUTime(os.Getpid())
	return c
}

// since logs where the machine's CPU went between c0 and c, as % of one
// core over the wall time between them.
func (c fleetCPU) since(phase string, c0 fleetCPU) {
	wall := c.at.Sub(c0.at)
	pct := func(d time.Duration) float64 { return 100 * float64(d) / float64(wall) }
	fleetLogf("%s: CPU over %v: daemon %.0f %%core, fleet hosts %.0f %%core, bench (userland, readers) %.0f %%core",
		phase, wall.Round(time.Millisecond), pct(c.daemon-c0.daemon), pct(c.hosts-c0.hosts), pct(c.itself-c0.itself))
}

// fleetRaiseNoFile raises the hard open-file limit to want when it is
// lower, as root may: the daemon and the fleet host (which inherit it)
// hold several descriptors per guest (link sockets, connections, ports).
func fleetRaiseNoFile(b *testing.B, want uint64) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatalf("reading RLIMIT_NOFILE: %v", err)
	}
	if lim.Max >= want {
		return
	}
	raised := syscall.Rlimit{Cur: want, Max: want}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
		fleetLogf("cannot raise RLIMIT_NOFILE to %d (hard limit %d): %v; a fleet this size may run out of descriptors", want, lim.Max, err)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func freeLoopbackAddr(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// fleetProfile saves the daemon's CPU profile over 10 s and its heap as
// pprof top-lists under $FLEET_PROFILES (nothing when unset).
func fleetProfile(b *testing.B, addr, phase string) {
	dir := os.Getenv(fleetProfilesEnv)
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Error(err)
		return
	}
	if os.Getenv(fleetProfilesRawEnv) != "" {
		// The goroutines by stack, counted (what holds stacks in RSS).
		if resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1"); err == nil {
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			_ = os.WriteFile(filepath.Join(dir, "fleet-"+phase+"-goroutine-stacks.txt"), data, 0o644)
		}
	}
	for _, p := range []struct{ kind, path string }{{"cpu", "/debug/pprof/profile?seconds=10"}, {"heap", "/debug/pprof/heap"}} {
		resp, err := http.Get("http://" + addr + p.path)
		if err != nil {
			b.Errorf("profile %s %s: %v", phase, p.kind, err)
			continue
		}
		raw, err := os.CreateTemp("", "fleetprof")
		if err != nil {
			resp.Body.Close()
			b.Error(err)
			continue
		}
		_, err = io.Copy(raw, resp.Body)
		resp.Body.Close()
		raw.Close()
		if err != nil {
			os.Remove(raw.Name())
			b.Errorf("profile %s %s: %v", phase, p.kind, err)
			continue
		}
		args := []string{"tool", "pprof", "-top", "-nodecount=30"}
		if p.kind == "heap" {
			args = append(args, "-sample_index=inuse_space")
		}
		out, err := exec.Command("go", append(args, raw.Name())...).Output()
		if os.Getenv(fleetProfilesRawEnv) != "" {
			if data, rerr := os.ReadFile(raw.Name()); rerr == nil {
				_ = os.WriteFile(filepath.Join(dir, "fleet-"+phase+"-"+p.kind+".pb.gz"), data, 0o644)
			}
		}
		if err == nil && p.kind == "cpu" {
			// Then by cumulative time: where the time goes from the top.
			var cum []byte
			cum, err = exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount=60", raw.Name()).Output()
			out = append(append(out, "\n"...), cum...)
		}
		os.Remove(raw.Name())
		if err != nil {
			b.Errorf("pprof %s %s: %v", phase, p.kind, err)
			continue
		}
		name := filepath.Join(dir, "fleet-"+phase+"-"+p.kind+".txt")
		if err := os.WriteFile(name, out, 0o644); err != nil {
			b.Error(err)
		}
	}
}

// fleetGoroutines saves, after delay, where the daemon's goroutines are
// (pprof -top -cum of the goroutine profile) as fleet-<phase>-goroutines.txt
// under $FLEET_PROFILES: what connections and recoveries wait on.
func fleetGoroutines(b *testing.B, addr, phase string, delay time.Duration) {
	dir := os.Getenv(fleetProfilesEnv)
	if dir == "" {
		return
	}
	time.Sleep(delay)
	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine")
	if err != nil {
		fleetLogf("goroutine profile: %v", err)
		return
	}
	defer resp.Body.Close()
	raw, err := os.CreateTemp("", "fleetprof")
	if err != nil {
		b.Log(err)
		return
	}
	defer os.Remove(raw.Name())
	_, err = io.Copy(raw, resp.Body)
	raw.Close()
	if err != nil {
		fleetLogf("goroutine profile: %v", err)
		return
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount=60", raw.Name()).Output()
	if err != nil {
		fleetLogf("pprof goroutines: %v", err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, "fleet-"+phase+"-goroutines.txt"), out, 0o644); err != nil {
		b.Log(err)
	}
}

// fleetConnected is fleetWait's test of a launch's end: n agents
// CONNECTED.
func fleetConnected(n int) func(list []api.Instance) (bool, string) {
	return func(list []api.Instance) (bool, string) {
		c := 0
		for _, inst := range list {
			if inst.Agent.State == api.AgentConnected {
				c++
			}
		}
		return c == n, fmt.Sprintf("%d of %d agents connected", c, n)
	}
}

// fleetRestarted is fleetWait's test of a restart's end: n agents
// CONNECTED since restartAt and ready instances Ready.
func fleetRestarted(restartAt time.Time, n, ready int) func(list []api.Instance) (bool, string) {
	return func(list []api.Instance) (bool, string) {
		c, r := 0, 0
		for _, inst := range list {
			if inst.Agent.State == api.AgentConnected && inst.Agent.Since != nil && inst.Agent.Since.After(restartAt) {
				c++
			}
			if inst.Ready() {
				r++
			}
		}
		return c == n && r == ready, fmt.Sprintf("%d of %d reconnected, %d of %d Ready", c, n, r, ready)
	}
}

// fleetProfilerUp reports whether the daemon's profiler answers.
func fleetProfilerUp(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// fleetDash is a logged-in dashboard session.
type fleetDash struct {
	base string
	hc   *http.Client
}

func fleetDashboard(ctx context.Context, b *testing.B, bin, stateDir string) *fleetDash {
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "guestlink"), "dashboard", "--print-url")
	cmd.Env = append(cleanEnv(), "GUESTLINK_STATE_DIR="+stateDir)
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("guestlink dashboard --print-url: %v", err)
	}
	login := strings.TrimSpace(string(out))
	i := strings.Index(login, "/login")
	if i < 0 {
		b.Fatalf("dashboard --print-url printed %q", login)
	}
	jar, _ := cookiejar.New(nil)
	dash := &fleetDash{base: login[:i], hc: &http.Client{Jar: jar, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, login, nil)
	resp, err := dash.hc.Do(req)
	if err != nil {
		b.Fatalf("logging in: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("logging in: %s", resp.Status)
	}
	return dash
}

func (f *fleetDash) get(ctx context.Context, path string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.base+path, nil)
	resp, err := f.hc.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return nil
}

// fleetStream is one dashboard live stream and when each event id arrived.
type fleetStream struct {
	// url is the stream its page opens; shows the instances the page
	// shows (whose events the stream must carry).
	url    string
	shows  map[string]bool
	cancel context.CancelFunc
	mu     sync.Mutex
	seen   map[int64]time.Time
	change chan struct{}
	// reconnects counts the streams the daemon dropped.
	reconnects int
}

// stream loads the dashboard page at path and opens the live stream it
// opens, as a browser would.
func (f *fleetDash) stream(ctx context.Context, path string) (*fleetStream, error) {
	url, shows, err := f.page(ctx, path)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &fleetStream{url: url, shows: shows, cancel: cancel, seen: map[int64]time.Time{}, change: make(chan struct{})}
	resp, err := f.openStream(ctx, url, 0)
	if err != nil {
		cancel()
		return nil, err
	}
	go func() {
		// As a browser's EventSource does, reconnect with the last id when
		// the daemon drops the stream (a stream that fell behind is
		// dropped and resumes by replay).
		var last int64
		for {
			last = s.read(resp.Body, last)
			resp.Body.Close()
			if ctx.Err() != nil {
				return
			}
			s.mu.Lock()
			s.reconnects++
			s.mu.Unlock()
			if resp, err = f.openStream(ctx, url, last); err != nil {
				return
			}
		}
	}()
	return s, nil
}

// page returns the live stream the page at path opens (its sse-connect)
// and the instances it shows: the list's rows, or the instance of an
// instance page.
func (f *fleetDash) page(ctx context.Context, path string) (string, map[string]bool, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.base+path, nil)
	resp, err := f.hc.Do(req)
	if err != nil {
		return "", nil, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", nil, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	doc, err := goquery.NewDocumentFromReader(resp.Body)
	if err != nil {
		return "", nil, fmt.Errorf("GET %s: %w", path, err)
	}
	url := doc.Find("body").AttrOr("sse-connect", "")
	if url == "" {
		return "", nil, fmt.Errorf("GET %s: the page opens no live stream", path)
	}
	shows := map[string]bool{}
	doc.Find(`[data-testid="instance-row"]`).Each(func(_ int, s *goquery.Selection) { shows[s.AttrOr("data-name", "")] = true })
	if name, ok := strings.CutPrefix(path, "/instances/"); ok {
		shows[name] = true
	}
	return url, shows, nil
}

func (f *fleetDash) openStream(ctx context.Context, url string, lastID int64) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.base+url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if lastID > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(lastID, 10))
	}
	resp, err := f.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("opening live stream: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("opening live stream: %s", resp.Status)
	}
	return resp, nil
}

// read records the ids the stream delivers until it ends and returns the
// last one.
func (s *fleetStream) read(body io.Reader, last int64) int64 {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "id: ")
		if !ok {
			continue
		}
		id, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		last = max(last, id)
		now := time.Now()
		s.mu.Lock()
		if _, dup := s.seen[id]; !dup {
			s.seen[id] = now
		}
		close(s.change)
		s.change = make(chan struct{})
		s.mu.Unlock()
	}
	return last
}

// waitID returns when the stream delivered event id, waiting until
// deadline.
func (s *fleetStream) waitID(id int64, deadline time.Time) (time.Time, bool) {
	for {
		s.mu.Lock()
		at, ok := s.seen[id]
		ch := s.change
		s.mu.Unlock()
		if ok {
			return at, true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return time.Time{}, false
		}
		select {
		case <-ch:
		case <-time.After(left):
		}
	}
}

func (s *fleetStream) close() { s.cancel() }

// reportRefreshes is what the daemon's goroutines say of the agents'
// report refreshes: whether the refresher runs (it runs only while
// refreshes are queued) and how many fetches of a report run.
type reportRefreshes struct {
	refresher bool
	fetches   int
	err       error
}

func (r reportRefreshes) pending() bool { return r.refresher || r.fetches > 0 }

func (r reportRefreshes) String() string {
	if r.err != nil {
		return "unknown (" + r.err.Error() + ")"
	}
	return fmt.Sprintf("refresher running %v, %d fetches running", r.refresher, r.fetches)
}

// fleetReportRefreshes reads the daemon's goroutines (pprof, debug=1) for
// its report refreshes.
func fleetReportRefreshes(addr string) reportRefreshes {
	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return reportRefreshes{err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return reportRefreshes{err: err}
	}
	return parseReportRefreshes(string(data))
}

// parseReportRefreshes counts the report refreshes in a goroutine dump of
// pprof's debug=1 form: groups of identical stacks, each headed by its
// count ("3 @ 0x... 0x...").
func parseReportRefreshes(dump string) reportRefreshes {
	var out reportRefreshes
	for group := range strings.SplitSeq(dump, "\n\n") {
		head, _, _ := strings.Cut(group, " @ ")
		if i := strings.LastIndexByte(head, '\n'); i >= 0 {
			head = head[i+1:] // the first group follows the dump's header
		}
		n, err := strconv.Atoi(strings.TrimSpace(head))
		if err != nil {
			continue
		}
		switch {
		case strings.Contains(group, "agentmon.(*refresher).run"):
			out.refresher = true
		case strings.Contains(group, "agentmon.(*monitor).fetchGuestLocked.func"),
			strings.Contains(group, "agentmon.(*monitor).fetchAfterAdvert"):
			out.fetches += n
		}
	}
	return out
}

// fleetIdleSettle measures pid's CPU in consecutive windows until two in a
// row agree (fleetSettled), at most max: it returns how long it waited,
// each window's CPU as % of a core, and whether it settled.
func fleetIdleSettle(pid int, window, max time.Duration) (time.Duration, string, bool, error) {
	began := time.Now()
	prev, err := benchCPUTime(pid)
	if err != nil {
		return 0, "", false, err
	}
	var used []time.Duration
	var series []string
	for time.Since(began) < max {
		time.Sleep(window) // a measuring window, not a wait for an event
		now, err := benchCPUTime(pid)
		if err != nil {
			return 0, "", false, err
		}
		used = append(used, now-prev)
		series = append(series, fmt.Sprintf("%.1f", 100*float64(now-prev)/float64(window)))
		prev = now
		if fleetSettled(used) {
			return time.Since(began), strings.Join(series, " "), true, nil
		}
	}
	return time.Since(began), strings.Join(series, " "), false, nil
}

// fleetSettled reports whether the last two windows' CPU agree: within 20 %
// of the larger, or within 20 ms (two ticks of /proc's 10 ms clock, which
// a quiet daemon's window at 1,000 guests is only a few of).
func fleetSettled(used []time.Duration) bool {
	if len(used) < 2 {
		return false
	}
	a, b := used[len(used)-2], used[len(used)-1]
	diff := max(a, b) - min(a, b)
	return diff <= 20*time.Millisecond || float64(diff) <= 0.2*float64(max(a, b))
}
