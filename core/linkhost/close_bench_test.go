package linkhost

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// BenchmarkCloseHybrid measures Close of a host holding n hybrid links
// (each guest's socket in a directory of its own, as the fleet's and the
// QEMU backends' are), what the daemon's stop pays in its "links" step:
// close-ms of wall time, close-cpu-ms and close-cpu-us/link of the
// process's CPU (rusage). Each link's close is its listener's close(2), the
// runtime poller's and the accept gate's EPOLL_CTL_DEL and the unlink of
// its socket file: about 35 µs of CPU on a loaded 2-core machine, the
// unlink half of it. It was 120 - 160 µs while link/unixsock bound each
// socket in a private directory removed after the bind, whose freeing
// (ext4 evicting the directory's inode) the socket's close paid.
func BenchmarkCloseHybrid(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("links=%d", n), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				dir := b.TempDir()
				h, err := New(Config{DisableVsock: true, MaxDescriptors: -1})
				if err != nil {
					b.Fatal(err)
				}
				for i := range n {
					ep := &contract.LinkEndpoint{Kind: contract.LinkHybrid, Path: filepath.Join(dir, fmt.Sprint(i), "link.sock")}
					if err := os.MkdirAll(filepath.Dir(ep.Path), 0o700); err != nil {
						b.Fatal(err)
					}
					if err := h.Attach(fmt.Sprint(i), ep); err != nil {
						b.Fatal(err)
					}
				}
				cpu0 := processCPU(b)
				t0 := time.Now()
				b.StartTimer()
				h.Close()
				b.StopTimer()
				b.ReportMetric(float64(time.Since(t0).Milliseconds()), "close-ms")
				cpu := processCPU(b) - cpu0
				b.ReportMetric(float64(cpu.Milliseconds()), "close-cpu-ms")
				b.ReportMetric(float64(cpu.Microseconds())/float64(n), "close-cpu-us/link")
				b.StartTimer()
			}
		})
	}
}

// processCPU is the CPU time (user and system) the test process used so far.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
