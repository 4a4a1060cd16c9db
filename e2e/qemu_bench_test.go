package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/internal/testenv"
	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/plugins/shared/qemuvm/qemutest"
)

// qemuIdleWindow is how long the idle CPU of the daemon is measured, with
// one VM and with none.
const qemuIdleWindow = 30 * time.Second

// readyMarker is the line the guest's ready script prints just before it
// runs `guestlink-agent ready` (the PATCH through /dev/lxd/sock).
const readyMarker = "guestlink: declaring ready"

// BenchmarkQEMUGuestLink boots one real VM per iteration under the qemu
// plugin through a real guestlinkd (make build's bin/, or GUESTLINK_BIN)
// and reports medians over the iterations of:
//   - start-to-started-s: QEMU start (the instance's started_at, taken
//     before the plugin spawns QEMU) to the agent's first STARTED seen by
//     the daemon (timeline);
//   - started-to-connected-s: STARTED to CONNECTED (the daemon's
//     advertisement over the serial link, validated by the agent);
//   - ready-ms: the guest's ready script starting `guestlink-agent ready`
//     once the daemon answers through /dev/lxd/sock (its console line,
//     seen by polling the console log every 2 ms) to the daemon recording
//     Ready (timeline): the agent command's start under TCG, the PATCH over
//     the serial link and the daemon's write;
//   - daemon-cpu-per-vm-%: the daemon's CPU (utime+stime of
//     /proc/<pid>/stat) over a 30 s idle window with the VM Ready, minus
//     the same window with no VM, as a percentage of one core (also both
//     windows in ms of CPU per second; the tick is 10 ms, so over 30 s the
//     resolution is 0.03 %).
//
// Run: GUESTLINK_BIN=$PWD/bin go test -run '^$' -bench QEMUGuestLink -benchtime 3x -timeout 30m ./e2e
func BenchmarkQEMUGuestLink(b *testing.B) {
	img := qemutest.RequiresQEMU(b)
	if !img.HasAgent {
		testenv.Requires(b, "the guest image with the agent", "cmd/guestlink-agent was missing when make guest-image ran: run make build guest-image")
	}
	bin := benchBinaries(b)
	for _, f := range []string{"plugins/qemu"} {
		if _, err := os.Stat(filepath.Join(bin, f)); err != nil {
			b.Fatalf("%s lacks %s (run make build): %v", bin, f, err)
		}
	}
	stateDir := benchNewStateDir(b)
	pid, c := benchQEMUDaemon(b, bin, stateDir)
	var startToStarted, startedToConnected, ready, cpuPerVM, cpuNoVM, cpuOneVM []float64
	accel := ""
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		noVM, err := benchIdleTicks(pid)
		if err != nil {
			b.Fatal(err)
		}
		name := fmt.Sprintf("bench-%d", i)
		created, err := c.Create(ctx, api.InstancesPost{Name: name, Backend: "qemu", Config: qemuConfig(img, "", nil), Start: true})
		if err != nil {
			b.Fatalf("launching %s: %v", name, err)
		}
		if created.Details["console_log"] == "" {
			b.Fatalf("instance %s has no console log in its details %v", name, created.Details)
		}
		markers := watchMarker(created.Details["console_log"])
		inst := benchWaitInstanceWithin(b, c, name, "Ready and connected", 3*time.Minute, func(i *api.Instance) bool {
			return i.StatusCode == int(status.Ready) && i.Agent.State == api.AgentConnected && i.Details["console_log"] != ""
		})
		markers.stop()
		accel = inst.Details["accel"]
		// Runtime changes reach the timeline just after the view: poll.
		var started, connected, readyAt time.Time
		var tl []api.TimelineEntry
		if !testwait.Until(time.Minute, func() bool {
			var err error
			if tl, err = c.Timeline(ctx, name, 0); err != nil {
				b.Fatal(err)
			}
			started, connected, readyAt = timelineTime(tl, "agent", "started"), timelineTime(tl, "agent", "connected"), timelineTime(tl, "ready", "true")
			return !started.IsZero() && !connected.IsZero() && !readyAt.IsZero()
		}) {
			b.Fatalf("timeline of %s lacks agent started/connected or ready: %+v", name, tl)
		}
		startToStarted = append(startToStarted, started.Sub(*inst.StartedAt).Seconds())
		startedToConnected = append(startedToConnected, connected.Sub(started).Seconds())
		if marker, ok := markers.lastBefore(readyAt); ok {
			ready = append(ready, float64(readyAt.Sub(marker))/float64(time.Millisecond))
		}

		// The VM idles Ready: the daemon's CPU over the window, then the
		// same window without a VM.
		time.Sleep(5 * time.Second) // the measurement is of the steady state: the ring poll settles to its connected period, which nothing announces
		withVM, err := benchIdleTicks(pid)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Delete(ctx, name, true); err != nil {
			b.Fatalf("deleting %s: %v", name, err)
		}
		cpuNoVM = append(cpuNoVM, noVM*1000)
		cpuOneVM = append(cpuOneVM, withVM*1000)
		cpuPerVM = append(cpuPerVM, (withVM-noVM)*100)
	}
	b.StopTimer()
	b.ReportMetric(median(startToStarted), "start-to-started-s")
	b.ReportMetric(median(startedToConnected), "started-to-connected-s")
	if len(ready) > 0 {
		b.ReportMetric(median(ready), "ready-ms")
	}
	b.ReportMetric(median(cpuPerVM), "daemon-cpu-per-vm-%")
	b.ReportMetric(median(cpuNoVM), "daemon-cpu-0vm-ms/s")
	b.ReportMetric(median(cpuOneVM), "daemon-cpu-1vm-ms/s")
	b.Logf("accel %s; start->STARTED %v s; STARTED->CONNECTED %v s; ready %v ms; daemon CPU ms/s with 0 VMs %v, with 1 VM %v; per VM %v %%",
		accel, startToStarted, startedToConnected, ready, cpuNoVM, cpuOneVM, cpuPerVM)
}

// benchQEMUDaemon starts guestlinkd on stateDir with bin's plugins (sim,
// qemu, qemu-legacy) and the QEMU guests under the state directory; it is
// stopped at cleanup. It returns the daemon's pid and a client.
func benchQEMUDaemon(b *testing.B, bin, stateDir string) (int, *client.Client) {
	b.Helper()
	logf, err := os.OpenFile(filepath.Join(stateDir, "guestlinkd.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "guestlinkd"), "--state-dir", stateDir,
		"--plugin-dir", filepath.Join(bin, "plugins"), "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = cleanEnv()
	if err := cmd.Start(); err != nil {
		logf.Close()
		b.Fatalf("starting guestlinkd: %v", err)
	}
	waited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(waited)
	}()
	c, err := client.New(filepath.Join(stateDir, "guestlink.sock"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if list, err := c.Instances(ctx, client.InstanceFilter{}); err == nil {
			for _, inst := range list {
				_ = c.Delete(ctx, inst.Name, true)
			}
		}
		c.Close()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-waited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-waited
		}
		if b.Failed() {
			data, _ := os.ReadFile(filepath.Join(stateDir, "guestlinkd.log"))
			b.Logf("guestlinkd log tail:\n%s", tailString(string(data), 8000))
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.ServerInfo(ctx)
		cancel()
		if err == nil {
			return cmd.Process.Pid, c
		}
		select {
		case <-waited:
			b.Fatalf("guestlinkd exited during start-up")
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("guestlinkd did not answer within a minute: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // the measurement's resolution: start-up is timed to the first answer
	}
}

// benchIdleTicks returns the share of one core the process used over
// qemuIdleWindow (0.01 = 1 %).
func benchIdleTicks(pid int) (float64, error) {
	before, err := procTicks(pid)
	if err != nil {
		return 0, err
	}
	began := time.Now()
	time.Sleep(qemuIdleWindow) // the measurement itself: CPU used over an idle window
	after, err := procTicks(pid)
	if err != nil {
		return 0, err
	}
	const clkTck = 100 // USER_HZ
	return float64(after-before) / clkTck / time.Since(began).Seconds(), nil
}

// benchWaitInstanceWithin polls the instance until cond holds.
func benchWaitInstanceWithin(b *testing.B, c *client.Client, name, what string, within time.Duration, cond func(*api.Instance) bool) *api.Instance {
	b.Helper()
	var inst *api.Instance
	var err error
	if !testwait.Until(within, func() bool {
		inst, err = c.Instance(context.Background(), name)
		return err == nil && cond(inst)
	}) {
		b.Fatalf("instance %q: no %s within %v (last: %+v, err %v)", name, what, within, inst, err)
	}
	return inst
}

// timelineTime returns the time of the first timeline entry of kind going
// to to (zero if none).
func timelineTime(tl []api.TimelineEntry, kind, to string) time.Time {
	for _, e := range tl {
		if e.Kind == kind && e.To == to {
			return e.Time
		}
	}
	return time.Time{}
}

// median returns the median of xs (0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// markerWatch records when readyMarker lines appear in a console log.
type markerWatch struct {
	done chan struct{}
	quit chan struct{}
	seen []time.Time
}

// watchMarker polls the console log every 2 ms and records the host time
// at which each readyMarker line appeared, until stop.
func watchMarker(path string) *markerWatch {
	w := &markerWatch{done: make(chan struct{}), quit: make(chan struct{})}
	go func() {
		defer close(w.done)
		var off int64
		var partial string
		buf := make([]byte, 64<<10)
		for {
			select {
			case <-w.quit:
				return
			case <-time.After(2 * time.Millisecond):
			}
			f, err := os.Open(path)
			if err != nil {
				continue
			}
			n, _ := f.ReadAt(buf, off)
			f.Close()
			if n == 0 {
				continue
			}
			now := time.Now()
			off += int64(n)
			text := partial + string(buf[:n])
			lines := strings.Split(text, "\n")
			partial = lines[len(lines)-1]
			for _, l := range lines[:len(lines)-1] {
				if strings.Contains(l, readyMarker) {
					w.seen = append(w.seen, now)
				}
			}
		}
	}()
	return w
}

// stop ends the polling.
func (w *markerWatch) stop() {
	close(w.quit)
	<-w.done
}

// lastBefore returns the last marker time before t (after stop).
func (w *markerWatch) lastBefore(t time.Time) (time.Time, bool) {
	var last time.Time
	for _, s := range w.seen {
		if s.Before(t) {
			last = s
		}
	}
	return last, !last.IsZero()
}
