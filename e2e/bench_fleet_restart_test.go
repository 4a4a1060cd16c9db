package e2e

// BenchmarkFleetRestart: BenchmarkFleet's restart phase alone, with its
// timeline (issue 28's restart-s): FLEET_RESTART_N fleet guests (default
// 300) launched Ready, the daemon stopped and exec'd again, and then,
// every 500 ms until every agent is CONNECTED again and every Ready flag
// back, what the new daemon is doing (its goroutines, classified by the
// restart's steps) beside what it reports (guests left to recover,
// agents connected, Ready flags). The connections and Ready flags are
// then timed from the new daemon's own events (replayed from the store).

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/guestlink/guestlink/agent/devlxdclient"
	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/link/devlxdapi"
)

// fleetRestartNEnv sizes BenchmarkFleetRestart's fleet.
const fleetRestartNEnv = "FLEET_RESTART_N"

// restartSteps classify the restarted daemon's goroutines: a goroutine
// counts for the first step whose function is on its stack.
var restartSteps = []struct{ name, fn string }{
	{"recovering (plugin Recover/LinkEndpoint)", "instance.(*Manager).recoverOne"},
	{"advertisement waiting for the gate", "agentmon.(*advGate).enter"},
	{"advertising (PUT /1.0 to the agent)", "agentmon.(*monitor).advertise"},
	{"advertiser waiting AdvertiseInterval", "agentmon.(*monitor).advertiser"},
	{"monitor step", "agentmon.(*monitor).steps"},
	{"agent report refresh", "agentmon.(*refresher).run"},
	{"devlxd declaration (PATCH /1.0)", "devlxd.(*Server).patchState"},
	{"devlxd handler", "transport/devlxd.(*Server)"},
	{"devlxd TLS handshake", "crypto/tls.(*Conn).HandshakeContext"},
	{"store write waiting", "db.(*writer).doAppend"},
	{"store writer", "db.(*writer).loop"},
	{"instance change", "instance.(*Manager).mutate"},
}

func BenchmarkFleetRestart(b *testing.B) {
	n := benchSize(b, fleetRestartNEnv, 300)
	fleetRaiseNoFile(b, uint64(8*n+4096))
	benchRaiseNoFile(b)
	bin := benchBinaries(b)
	pprofAddr := freeLoopbackAddr(b)
	b.Setenv("GUESTLINK_DEBUG_PPROF", pprofAddr)
	stateDir := benchNewStateDir(b)
	d := benchStartDaemon(b, bin, stateDir, "--log-level", "info")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cg, cctx := errgroup.WithContext(ctx)
	cg.SetLimit(16)
	for i := range n {
		cg.Go(func() error {
			name := "f-" + strconv.Itoa(i)
			if _, err := d.Client.Create(cctx, api.InstancesPost{Name: name, Backend: "fleet", Start: true}); err != nil {
				return fmt.Errorf("creating %s: %w", name, err)
			}
			return nil
		})
	}
	if err := cg.Wait(); err != nil {
		b.Fatal(err)
	}
	list := fleetWait(ctx, b, d, "launch", 5*time.Minute, fleetConnected(n))
	// Each guest's userland declares Ready on its devlxd socket, as in
	// BenchmarkFleet's storm (retried while the agent or daemon is busy).
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for _, inst := range list {
		sock := filepath.Join(inst.Details["guest_dir"], "rootfs", "dev", "lxd", "sock")
		g.Go(func() error {
			c := devlxdclient.New(sock)
			defer c.CloseIdleConnections()
			var err error
			for range 30 {
				if err = devlxdclient.Declare(gctx, c, devlxdapi.StateReady); err == nil {
					return nil
				}
				if !sleepCtx(gctx, time.Second) {
					return gctx.Err()
				}
			}
			return fmt.Errorf("declaring %s Ready: %w", inst.Name, err)
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	fleetWait(ctx, b, d, "Ready", 10*time.Minute, func(list []api.Instance) (bool, string) {
		r := 0
		for _, inst := range list {
			if inst.Ready() {
				r++
			}
		}
		return r == n, fmt.Sprintf("%d of %d Ready", r, n)
	})
	// The last event before the restart: the new daemon's events are
	// replayed from after it.
	lastID := int64(0)
	{
		ectx, ecancel := context.WithTimeout(ctx, 30*time.Second)
		evc, _ := d.Client.Events(ectx, client.EventFilter{Types: []string{api.EventTypeLifecycle}, Replay: true})
		quiet := time.NewTimer(2 * time.Second)
	drain:
		for {
			select {
			case e, ok := <-evc:
				if !ok {
					break drain
				}
				lastID = max(lastID, e.ID)
				quiet.Reset(2 * time.Second)
			case <-quiet.C:
				break drain
			}
		}
		ecancel()
	}

	restartAt := time.Now()
	d.Stop()
	fleetLogf("restart: the daemon stopped in %v", time.Since(restartAt).Round(time.Millisecond))
	execAt := time.Now()
	type sample struct {
		at                         time.Duration
		recovering, connected, rdy int
		steps                      map[string]int
		goroutines                 int
		daemonCPU, hostsCPU        time.Duration
		reachable                  bool
	}
	var samples []sample
	var daemonPID atomic.Int64 // the new daemon's, once it answered
	sampled := make(chan struct{})
	stopSampling := make(chan struct{})
	dir := os.Getenv(fleetProfilesEnv)
	go func() {
		defer close(sampled)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
			s := sample{at: time.Since(execAt), steps: map[string]int{}}
			if pid := daemonPID.Load(); pid != 0 {
				s.daemonCPU, _ = benchCPUTime(int(pid))
			}
			for _, pid := range fleetHostPIDs(stateDir) {
				h, _ := benchCPUTime(pid)
				s.hostsCPU += h
			}
			resp, err := http.Get("http://" + pprofAddr + "/debug/pprof/goroutine?debug=2")
			if err != nil {
				samples = append(samples, s)
				continue
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			s.reachable = true
			if dir != "" {
				_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("fleet-restart-goroutines-%03d.txt", i)), data, 0o644)
			}
			for g := range strings.SplitSeq(string(data), "\n\ngoroutine ") {
				s.goroutines++
				for _, st := range restartSteps {
					if strings.Contains(g, st.fn) {
						s.steps[st.name]++
						break
					}
				}
			}
			sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
			if info, err := d.Client.ServerInfo(sctx); err == nil {
				s.recovering = info.Environment.Recovering
			}
			if list, err := d.Client.Instances(sctx, client.InstanceFilter{Backend: "fleet"}); err == nil {
				for _, inst := range list {
					if inst.Agent.State == api.AgentConnected && inst.Agent.Since != nil && inst.Agent.Since.After(restartAt) {
						s.connected++
					}
					if inst.Ready() {
						s.rdy++
					}
				}
			}
			scancel()
			samples = append(samples, s)
		}
	}()
	cpu0 := fleetCPU{at: time.Now()}
	for _, pid := range fleetHostPIDs(stateDir) {
		h, _ := benchCPUTime(pid)
		cpu0.hosts += h
	}
	cpu0.itself, _ = benchCPUTime(os.Getpid())
	up, err := d.Start()
	if err != nil {
		b.Fatal(err)
	}
	daemonPID.Store(int64(d.PID()))
	fleetLogf("restart: the new daemon answered %v after exec", up.Round(time.Millisecond))
	fleetWait(ctx, b, d, "restart", 10*time.Minute, fleetRestarted(restartAt, n, n))
	rx := time.Since(execAt)
	close(stopSampling)
	<-sampled
	cpu1 := fleetCPUNow(d, stateDir)
	cpu1.since("restart", cpu0)
	fleetLogf("restart: every agent CONNECTED and every Ready flag back %v after exec (the list polled every 2 s)", rx.Round(time.Millisecond))

	// The new daemon's events, replayed: when each agent connected and
	// each Ready came back, from exec.
	var conn, ready []time.Duration
	readyAt, connAt := map[string]time.Duration{}, map[string]time.Duration{}
	ectx, ecancel := context.WithTimeout(ctx, time.Minute)
	defer ecancel()
	evc, _ := d.Client.Events(ectx, client.EventFilter{Types: []string{api.EventTypeLifecycle}, Since: lastID})
	for len(conn) < n || len(ready) < n {
		e, ok := <-evc
		if !ok {
			b.Fatalf("events ended with %d connections and %d Ready flags of %d", len(conn), len(ready), n)
		}
		l, err := e.Lifecycle()
		if err != nil {
			continue
		}
		switch l.Action {
		case events.InstanceAgentConnected:
			conn = append(conn, e.Timestamp.Sub(execAt))
			connAt[e.Instance] = e.Timestamp.Sub(execAt)
		case events.InstanceReady:
			ready = append(ready, e.Timestamp.Sub(execAt))
			readyAt[e.Instance] = e.Timestamp.Sub(execAt)
		}
	}
	ecancel()
	slices.Sort(conn)
	slices.Sort(ready)
	q := func(ds []time.Duration, p int) string {
		return ds[min(len(ds)-1, len(ds)*p/100)].Round(10 * time.Millisecond).String()
	}
	fleetLogf("restart: from exec, Ready restored first %s, p50 %s, p90 %s, last %s", q(ready, 0), q(ready, 50), q(ready, 90), q(ready, 100))
	fleetLogf("restart: from exec, agents CONNECTED first %s, p50 %s, p90 %s, last %s", q(conn, 0), q(conn, 50), q(conn, 90), q(conn, 100))
	// A guest's Ready comes back with its advertisement (the agent hands
	// it back in its answer to the PUT, the daemon records it before it
	// counts the advertisement done); its CONNECTED when the monitor reads
	// the agent's next word.
	var gap []time.Duration
	for name, r := range readyAt {
		if c, ok := connAt[name]; ok {
			gap = append(gap, c-r)
		}
	}
	slices.Sort(gap)
	if len(gap) > 0 {
		fleetLogf("restart: a guest's CONNECTED after its Ready: min %s, p50 %s, p90 %s, max %s", q(gap, 0), q(gap, 50), q(gap, 90), q(gap, 100))
	}
	for _, line := range restartLogLines(d) {
		fleetLogf("restart: the daemon's log: %s", line)
	}
	var prev sample
	for _, s := range samples {
		if !s.reachable {
			continue
		}
		var parts []string
		for _, st := range restartSteps {
			if c := s.steps[st.name]; c > 0 {
				parts = append(parts, st.name+" "+strconv.Itoa(c))
			}
		}
		dt := s.at - prev.at
		pct := func(now, before time.Duration) int {
			if prev.at == 0 || dt <= 0 {
				return 0
			}
			return int(100 * (now - before) / dt)
		}
		fleetLogf("restart +%5.1fs: daemon %3d%%, hosts %3d%%; %d to recover, %d connected, %d Ready; %d goroutines: %s",
			s.at.Seconds(), pct(s.daemonCPU, prev.daemonCPU), pct(s.hostsCPU, prev.hostsCPU), s.recovering, s.connected, s.rdy, s.goroutines, strings.Join(parts, ", "))
		prev = s
	}
	b.ReportMetric(rx.Seconds(), "restart-s")
	b.ReportMetric(ready[len(ready)-1].Seconds(), "last-ready-s")
	b.ReportMetric(conn[len(conn)-1].Seconds(), "last-connected-s")
	cancel()
	d.Stop()
}

// restartLogLines returns the daemon log's lines of its last start (from
// its last "starting" line on) that say when a step of it ended.
func restartLogLines(d *benchDaemon) []string {
	data, err := os.ReadFile(filepath.Join(d.StateDir, "guestlinkd.log"))
	if err != nil {
		return nil
	}
	var out []string
	for line := range strings.Lines(string(data)) {
		for _, w := range []string{"plugin started", "instances loaded", "guestlinkd started", "instances recovered", "guestlinkd stopped"} {
			if strings.Contains(line, w) {
				out = append(out, strings.TrimSpace(line))
			}
		}
	}
	return out
}
