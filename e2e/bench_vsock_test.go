package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/internal/testenv"
	"github.com/guestlink/guestlink/link/hybrid"
	"github.com/guestlink/guestlink/plugins/shared/qemuvm"
	"github.com/guestlink/guestlink/plugins/shared/qemuvm/qemutest"
)

// Sizes of BenchmarkAgentVsock's round: GETs per path, MiB streamed.
const (
	vsockBenchGets = 300
	vsockBenchMiB  = 32
)

// vsockBenchLineRE matches the figures the guest program prints.
var vsockBenchLineRE = regexp.MustCompile(`(?m)^vsockbench: (\S+) ([0-9.]+) `)

// vsockCountersFullRE matches the device's closing line with both
// directions.
var vsockCountersFullRE = regexp.MustCompile(`(\d+) connections, (\d+) packets and (\d+) bytes from the guest, (\d+) packets and (\d+) bytes to it`)

// BenchmarkAgentVsock is the agent's path over guestlink's own vsock
// device (qemu.vsock=user) in a real QEMU guest (TCG here), with make
// build's binaries (or GUESTLINK_BIN). One guest boots; each iteration
// runs testdata/vsockbench inside it through exec, which reports:
//   - agent-vsock/floor-median-x: GET /1.0 through the guest's
//     /dev/lxd/sock (the agent, then AF_VSOCK through the device to the
//     daemon) over the floor, a plain net/http GET on a Unix socket served
//     in the same guest process with the same bytes, interleaved in the
//     same run (vsockBenchGets each); also both medians in µs;
//   - device-MB/s: vsockBenchMiB MiB guest -> host on one connection, from
//     the guest's dial to the host's answer that it read them all;
//   - device-cpu-us/packet: the device process's CPU (utime+stime of
//     /proc/<pid>/stat) over the guest's life divided by the packets it
//     moved both ways (its own count, logged when QEMU stops).
//
// Run: make build && GUESTLINK_BIN=$PWD/bin go test -run '^$' -bench AgentVsock -benchtime 1x -timeout 30m ./e2e
func BenchmarkAgentVsock(b *testing.B) {
	img := qemutest.RequiresQEMU(b)
	if !img.HasAgent {
		testenv.Requires(b, "the guest image with the agent", "cmd/guestlink-agent was missing when make guest-image ran: run make build guest-image")
	}
	bin := benchBinaries(b)
	stateDir := benchNewStateDir(b)
	_, c := benchQEMUDaemon(b, bin, stateDir)
	ctx := context.Background()
	prog := filepath.Join(b.TempDir(), "vsockbench")
	build := exec.Command("go", "build", "-trimpath", "-o", prog, "./testdata/vsockbench")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building testdata/vsockbench: %v\n%s", err, out)
	}
	const name = "bench-vsock"
	if _, err := c.Create(ctx, api.InstancesPost{Name: name, Backend: "qemu", Start: true,
		Config: qemuConfig(img, "", map[string]string{qemuvm.KeyVsock: qemuvm.VsockUser})}); err != nil {
		b.Fatalf("launching %s: %v", name, err)
	}
	inst := benchWaitInstanceWithin(b, c, name, "Ready and CONNECTED over vsock", 2*qemuBootTimeout, func(i *api.Instance) bool {
		return i.StatusCode == int(status.Ready) && i.Agent.State == api.AgentConnected
	})
	if inst.Details["vsock"] != qemuvm.VsockUser {
		b.Fatalf("instance details %v: want the user vsock device", inst.Details)
	}
	dir := filepath.Dir(inst.Details["console_log"])
	vpid := vsockdPID(b, dir)
	if vpid == 0 {
		b.Fatalf("no vsock device process for %s", dir)
	}
	cli := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "guestlink"), args...)
		cmd.Env = append(cleanEnv(), "GUESTLINK_STATE_DIR="+stateDir)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := cli("file", "push", "--mode", "0755", prog, name+"/tmp/vsockbench"); err != nil {
		b.Fatalf("guestlink file push: %v\n%s", err, out)
	}
	// The host end of the throughput test: count the bytes, answer.
	const hostPort = 52843
	ln, err := net.Listen("unix", hybrid.HostPath(filepath.Join(dir, "vsock.sock"), hostPort))
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			// The length is known: the device ends a connection at the
			// guest's SHUTDOWN (no half-close), so no EOF is waited for.
			n, _ := io.CopyN(io.Discard, conn, vsockBenchMiB<<20)
			fmt.Fprintf(conn, "ok %d\n", n)
			conn.Close()
		}
	}()

	figures := map[string][]float64{}
	b.ResetTimer()
	for range b.N {
		out, err := cli("exec", name, "--", "/tmp/vsockbench", "-n", strconv.Itoa(vsockBenchGets),
			"-port", strconv.Itoa(hostPort), "-mb", strconv.Itoa(vsockBenchMiB))
		if err != nil {
			b.Fatalf("vsockbench in the guest: %v\n%s", err, out)
		}
		for _, m := range vsockBenchLineRE.FindAllStringSubmatch(out, -1) {
			v, _ := strconv.ParseFloat(m[2], 64)
			figures[m[1]] = append(figures[m[1]], v)
		}
	}
	b.StopTimer()
	ticks, err := procTicks(vpid)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.SetState(ctx, name, api.InstanceStatePut{Action: api.ActionStop, Force: true}); err != nil {
		b.Fatalf("stopping %s: %v", name, err)
	}
	var log []byte
	var m []string
	benchWaitInstanceWithin(b, c, name, "the device's closing counters", qemuOpTimeout, func(*api.Instance) bool {
		log, _ = os.ReadFile(filepath.Join(dir, "vsockd.log"))
		m = vsockCountersFullRE.FindStringSubmatch(string(log))
		return m != nil
	})
	pktFrom, _ := strconv.Atoi(m[2])
	pktTo, _ := strconv.Atoi(m[4])
	for _, k := range []string{"agent-vsock-p50", "floor-p50", "throughput"} {
		if len(figures[k]) != b.N {
			b.Fatalf("the guest reported %s %d times in %d rounds", k, len(figures[k]), b.N)
		}
	}
	agent, floor := median(figures["agent-vsock-p50"]), median(figures["floor-p50"])
	b.ReportMetric(agent/floor, "agent-vsock/floor-median-x")
	b.ReportMetric(agent, "agent-vsock-median-us")
	b.ReportMetric(floor, "floor-median-us")
	b.ReportMetric(median(figures["agent-vsock-p99"])/agent, "agent-vsock/p99-median-x")
	b.ReportMetric(median(figures["throughput"]), "device-MB/s")
	const clkTck = 100 // USER_HZ
	cpuUS := float64(ticks) / clkTck * 1e6
	b.ReportMetric(cpuUS/float64(pktFrom+pktTo), "device-cpu-us/packet")
	b.Logf("accel %s; guest figures %v; device CPU %.2f s for %d packets from the guest and %d to it (%s)",
		inst.Details["accel"], figures, cpuUS/1e6, pktFrom, pktTo, strings.TrimSpace(string(log)))
}
