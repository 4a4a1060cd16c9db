package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
)

// Exec and file benchmarks (issue 26): the round trip of `guestlink exec
// NAME -- true` and the throughput of `guestlink file push` of 100 MiB, per
// link type, with the CPU each process used per operation (its own
// accounting, /proc/PID/stat) and the ratio to a floor measured in the
// same iterations, so that the machine's load hits both alike.

// benchExecLinks are the link types measured: the sim's default (hybrid,
// a Unix socket as QEMU's vhost-vsock hybrid convention) and the serial
// link (link/serialmux over a virtio-serial port, a pseudo-terminal here).
var benchExecLinks = []struct{ name string }{{"hybrid"}, {"serial"}}

// benchExecGuests launches one sim guest per link type, named for it.
func benchExecGuests(b *testing.B, d *benchDaemon) map[string]*api.Instance {
	return benchLaunchConnected(b, d, map[string]map[string]string{
		"hybrid": {},
		"serial": {"sim.link": "serial"},
	})
}

// benchGuestCPU measures the CPU of the processes one operation on a sim
// guest goes through: the daemon, the guest's agent (guest_pid) and the
// simulated VMM that runs it (its parent, which relays the serial port).
type benchGuestCPU struct {
	names []string
	pids  []int
}

func newBenchGuestCPU(b *testing.B, d *benchDaemon, inst *api.Instance) *benchGuestCPU {
	b.Helper()
	agent, err := strconv.Atoi(inst.Details["guest_pid"])
	if err != nil {
		b.Fatalf("guest %s has no guest_pid: %v", inst.Name, inst.Details)
	}
	vmm, err := benchParent(agent)
	if err != nil {
		b.Fatal(err)
	}
	return &benchGuestCPU{names: []string{"daemon", "agent", "vmm"}, pids: []int{d.PID(), agent, vmm}}
}

// now returns the CPU time each process used so far.
func (c *benchGuestCPU) now(b *testing.B) []time.Duration {
	out := make([]time.Duration, len(c.pids))
	for i, pid := range c.pids {
		t, err := benchCPUTime(pid)
		if err != nil {
			b.Fatalf("CPU time of the %s (pid %d): %v", c.names[i], pid, err)
		}
		out[i] = t
	}
	return out
}

// report adds "<name>-cpu-ms/op" for each process and "cpu-ms/op" for all.
func (c *benchGuestCPU) report(b *testing.B, before, after []time.Duration, ops int) {
	var total time.Duration
	for i := range c.pids {
		d := after[i] - before[i]
		total += d
		b.ReportMetric(float64(d)/float64(time.Millisecond)/float64(ops), c.names[i]+"-cpu-ms/op")
	}
	b.ReportMetric(float64(total)/float64(time.Millisecond)/float64(ops), "cpu-ms/op")
}

// benchParent returns the parent pid of pid.
func benchParent(pid int) (int, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(data, ')')
	fields := strings.Fields(string(data[i+1:]))
	if i < 0 || len(fields) < 2 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return strconv.Atoi(fields[1])
}

// BenchmarkExecRoundTrip measures `guestlink exec NAME -- true` as the Go
// client makes it, through the real daemon and a real sim guest's agent,
// per link type: POST /1.0/instances/NAME/exec, the four websockets
// (each a new TLS connection over the link, relayed by the daemon), the
// command, and the wait for its exit code. Each iteration also runs `true`
// from this process (fork and exec, wait): the floor, the cost of the
// command itself on this machine. Metrics: median-ms, p99-ms,
// floor-median-ms, floor-median-x (median ÷ the floor's), and the CPU per
// exec of the daemon, the agent and the VMM (cpu-ms/op, their sum).
func BenchmarkExecRoundTrip(b *testing.B) {
	bin := benchBinaries(b)
	d := benchStartDaemon(b, bin, benchNewStateDir(b))
	guests := benchExecGuests(b, d)
	ctx := context.Background()
	trueBin, err := exec.LookPath("true")
	if err != nil {
		b.Fatal(err)
	}
	for _, link := range benchExecLinks {
		b.Run(link.name, func(b *testing.B) {
			cpu := newBenchGuestCPU(b, d, guests[link.name])
			var lat, floor benchLatency
			ops := 0
			before := cpu.now(b)
			for b.Loop() {
				start := time.Now()
				code, err := d.Client.Exec(ctx, link.name, api.ExecPost{Command: []string{"true"}}, client.ExecIO{})
				if err != nil || code != 0 {
					b.Fatalf("exec true over the %s link: %d %v", link.name, code, err)
				}
				lat.Add(time.Since(start))
				ops++
				start = time.Now()
				if err := exec.Command(trueBin).Run(); err != nil {
					b.Fatal(err)
				}
				floor.Add(time.Since(start))
			}
			cpu.report(b, before, cpu.now(b), ops)
			lat.Report(b, "", time.Millisecond)
			b.ReportMetric(float64(floor.Percentile(50))/float64(time.Millisecond), "floor-median-ms")
			b.ReportMetric(float64(lat.Percentile(50))/float64(floor.Percentile(50)), "floor-median-x")
		})
	}
}

// benchPushSize is the size of a benchmark file push.
const benchPushSize = 100 << 20

// BenchmarkFilePush measures `guestlink file push` of a 100 MiB file into
// a sim guest through the real daemon and agent, per link type: the Go
// client streams it to the admin API, the daemon relays it over the link
// (TLS) to the agent's /1.0/files, which writes it under the guest's root.
// Each iteration also uploads the same file with a plain net/http POST
// over a Unix socket to a server in this process that writes it to a file:
// the floor, an HTTP upload to a file on this machine. Metrics: MB/s
// (10^6 bytes per second), floor-MB/s, floor-x (how many times slower than
// the floor), and the CPU per push of the daemon, the agent and the VMM.
func BenchmarkFilePush(b *testing.B) {
	bin := benchBinaries(b)
	d := benchStartDaemon(b, bin, benchNewStateDir(b))
	guests := benchExecGuests(b, d)
	ctx := context.Background()
	src := filepath.Join(b.TempDir(), "push.bin")
	f, err := os.Create(src)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.CopyN(f, rand.Reader, benchPushSize); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	upload := benchUploadFloor(b)
	for _, link := range benchExecLinks {
		b.Run(link.name, func(b *testing.B) {
			cpu := newBenchGuestCPU(b, d, guests[link.name])
			var push, floor time.Duration
			ops := 0
			before := cpu.now(b)
			for b.Loop() {
				in, err := os.Open(src)
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				err = d.Client.PushFile(ctx, link.name, "/push.bin", in, benchPushSize, client.FileArgs{})
				push += time.Since(start)
				in.Close()
				if err != nil {
					b.Fatalf("pushing 100 MiB over the %s link: %v", link.name, err)
				}
				ops++
				in, err = os.Open(src)
				if err != nil {
					b.Fatal(err)
				}
				start = time.Now()
				err = upload(in)
				floor += time.Since(start)
				in.Close()
				if err != nil {
					b.Fatal(err)
				}
			}
			cpu.report(b, before, cpu.now(b), ops)
			mbps := func(d time.Duration) float64 { return float64(ops) * benchPushSize / 1e6 / d.Seconds() }
			b.ReportMetric(mbps(push), "MB/s")
			b.ReportMetric(mbps(floor), "floor-MB/s")
			b.ReportMetric(mbps(floor)/mbps(push), "floor-x")
		})
	}
}

// benchUploadFloor starts a plain net/http server on a Unix socket that
// writes each POST's body to a file, and returns the upload of a body to
// it.
func benchUploadFloor(b *testing.B) func(io.Reader) error {
	b.Helper()
	dir := b.TempDir()
	sock := filepath.Join(dir, "upload.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	dst := filepath.Join(dir, "upload.bin")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, err := os.Create(dst)
		if err == nil {
			_, err = io.Copy(out, r.Body)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	return func(body io.Reader) error {
		req, err := http.NewRequest(http.MethodPost, "http://floor/upload", body)
		if err != nil {
			return err
		}
		req.ContentLength = benchPushSize
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := hc.Do(req)
		if err != nil {
			return fmt.Errorf("floor upload: %w", err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("floor upload: %s", resp.Status)
		}
		return nil
	}
}
