package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
)

// benchFDs returns how many descriptors a process has open.
func benchFDs(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents), err
}

// BenchmarkWait10k holds 10,000 concurrent GET
// /1.0/instances/{name}/wait?for=ready long polls on one daemon, each on
// its own connection to the admin socket, then has the guest's agent
// declare Ready. It reports the daemon's resident memory per waiter
// (VmRSS once every connection is open, minus before), the daemon's CPU
// time from the declaration to the last answer per waiter, and that wall
// time per waiter. Run it alone: -run '^$' -bench BenchmarkWait10k
// -benchtime 1x.
func BenchmarkWait10k(b *testing.B) {
	const n = 10000
	benchRaiseNoFile(b)
	bin := benchBinaries(b)
	d := benchStartDaemon(b, bin, benchNewStateDir(b))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := d.Client.Create(ctx, api.InstancesPost{Name: "w1", Backend: "sim"}); err != nil {
		b.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(d.StateDir, "guestlink.sock"))
		},
		DisableKeepAlives: true,
	}}
	var rssPer, cpuPer, wallPer float64
	for b.Loop() {
		b.StopTimer()
		if _, err := d.Client.SetState(ctx, "w1", api.InstanceStatePut{Action: api.ActionStart}); err != nil {
			b.Fatal(err)
		}
		if w, err := d.Client.Wait(ctx, "w1", api.WaitAgentConnected, 2*time.Minute); err != nil || w.Outcome != api.WaitMet {
			b.Fatalf("agent: %+v %v", w, err)
		}
		inst, err := d.Client.Instance(ctx, "w1")
		if err != nil {
			b.Fatal(err)
		}
		pid := d.PID()
		fds0, err := benchFDs(pid)
		if err != nil {
			b.Fatal(err)
		}
		rss0, err := benchProcStatus(pid, "VmRSS")
		if err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				resp, err := hc.Get("http://guestlink/1.0/instances/w1/wait?for=ready&timeout=10m")
				if err != nil {
					b.Error(err)
					return
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				var env struct {
					Metadata api.InstanceWait `json:"metadata"`
				}
				if err := json.Unmarshal(body, &env); err != nil || env.Metadata.Outcome != api.WaitMet {
					b.Errorf("answer %s: %v", body, err)
				}
			})
		}
		// Every long poll holds one accepted connection in the daemon.
		for {
			fds, err := benchFDs(pid)
			if err != nil {
				b.Fatal(err)
			}
			if fds >= fds0+n {
				break
			}
			time.Sleep(20 * time.Millisecond) // the daemon gives no signal of its own
		}
		time.Sleep(time.Second) // let the last requests reach their Wait after their accept
		rss1, err := benchProcStatus(pid, "VmRSS")
		if err != nil {
			b.Fatal(err)
		}
		rssPer += float64(rss1-rss0) * 1024 / n
		cpu0, err := benchCPUTime(pid)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "guestlink-agent"), "ready")
		cmd.Env = append(cleanEnv(), "GUESTLINK_AGENT_DEVLXD_SOCKET="+inst.DevlxdSocket)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("ready: %v: %s", err, out)
		}
		wg.Wait()
		wall := time.Since(start)
		b.StopTimer()
		cpu1, err := benchCPUTime(pid)
		if err != nil {
			b.Fatal(err)
		}
		cpuPer += float64((cpu1 - cpu0).Nanoseconds()) / n
		wallPer += float64(wall.Nanoseconds()) / n
		if _, err := d.Client.SetState(ctx, "w1", api.InstanceStatePut{Action: api.ActionStop, Force: true}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(rssPer/float64(b.N), "rss-B/waiter")
	b.ReportMetric(cpuPer/float64(b.N), "cpu-ns/waiter")
	b.ReportMetric(wallPer/float64(b.N), "wall-ns/waiter")
	b.ReportMetric(0, "ns/op")
}
