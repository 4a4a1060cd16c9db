package agentmon

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
	"github.com/guestlink/guestlink/plugins/shared/ringbuffer"
)

// floodSockEnv names the socket a flooding guest process connects to; set,
// TestRingFloodGuestProcess is that process.
const floodSockEnv = "GUESTLINK_TEST_RINGFLOOD_SOCK"

// floodPaceEnv, when set to a duration, makes the flooding guest's VMM
// announce ring data at most once per that duration, as the sim VMM does
// (plugins/sim/simvm ringDataInterval).
const floodPaceEnv = "GUESTLINK_TEST_RINGFLOOD_PACE"

// TestRingFloodGuestProcess is not a test: BenchmarkRingFlood runs the test
// binary again with floodSockEnv set to make it the guest and its VMM, in
// a process of its own so that its CPU is not the daemon's. The guest
// writes zeros into a 16-byte ring (QEMU's, as LXD sets it) as fast as it
// can, like cat /dev/zero into its ring port; the VMM announces the ring
// data on the first connection (coalesced while one announcement is unsent,
// and paced by floodPaceEnv) and serves ring reads on the second.
func TestRingFloodGuestProcess(t *testing.T) {
	sock := os.Getenv(floodSockEnv)
	if sock == "" {
		t.Skip("helper process of BenchmarkRingFlood")
	}
	events, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	reads, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ring, err := ringbuffer.New(16)
	if err != nil {
		t.Fatal(err)
	}
	pace, _ := time.ParseDuration(os.Getenv(floodPaceEnv))
	notify := make(chan struct{}, 1)
	go func() { // the guest
		zeros := make([]byte, 64<<10)
		for {
			ring.Write(zeros)
			select {
			case notify <- struct{}{}:
			default:
			}
		}
	}()
	go func() { // the VMM's announcements
		for range notify {
			if _, err := events.Write([]byte{'E'}); err != nil {
				os.Exit(0)
			}
			if pace > 0 {
				time.Sleep(pace)
			}
		}
	}()
	var hdr [4]byte
	for { // the VMM's ring reads
		if _, err := io.ReadFull(reads, hdr[:]); err != nil {
			os.Exit(0) // the daemon side ended
		}
		data := ring.Read(int(binary.BigEndian.Uint32(hdr[:])))
		binary.BigEndian.PutUint32(hdr[:], uint32(len(data)))
		if _, err := reads.Write(append(hdr[:], data...)); err != nil {
			os.Exit(0)
		}
	}
}

// floodBackend reads the flooding guest's ring over its connection.
type floodBackend struct {
	contract.Backend // only ReadRing is used
	inst             *instance.Instance

	mu    sync.Mutex
	conn  net.Conn
	reads int
}

func (f *floodBackend) ReadRing(_ context.Context, _ contract.Handle, max int) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(max))
	if _, err := f.conn.Write(hdr[:]); err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(f.conn, hdr[:]); err != nil {
		return nil, err
	}
	data := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	_, err := io.ReadFull(f.conn, data)
	return data, err
}

func (f *floodBackend) readCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

func (f *floodBackend) GetByUUID(context.Context, string) (*instance.Instance, error) {
	return f.inst, nil
}

func (f *floodBackend) SetAgentState(context.Context, string, instance.AgentState, time.Time) error {
	return nil
}

func (f *floodBackend) Runtime(context.Context, string) (contract.Backend, contract.Handle, error) {
	return f, contract.Handle("h"), nil
}

// startFloodGuest starts the flooding guest process and returns its two
// connections (announcements, reads). The process group is killed at the
// end of the benchmark.
func startFloodGuest(b *testing.B, pace time.Duration) (events, reads net.Conn) {
	b.Helper()
	sock := filepath.Join(b.TempDir(), "flood.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRingFloodGuestProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), floodSockEnv+"="+sock, floodPaceEnv+"="+pace.String())
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	var conns [2]net.Conn
	for i := range conns {
		if conns[i], err = ln.Accept(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conns[i].Close() })
	}
	return conns[0], conns[1]
}

// cpuTime is the CPU time (user and system) this process used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRingFlood runs a guest flooding its ring buffer (a separate
// process: a 16-byte ringbuffer.Ring fed with zeros as fast as it goes, its
// VMM announcing ring data) against one monitor in this process, which
// stands for the daemon: every announcement is a backend event, every ring
// read a round trip to the guest's process. It reports the daemon side's
// CPU as %core (getrusage of this process over wall time), the ring reads
// and the announcements handled per second. The cases:
//
//	before:     no ring budget, announcements as fast as they are taken (main before the fix)
//	budget:     the default ring budget, announcements paced as the sim VMM paces them (now)
//	unpaced:    the default ring budget, a backend that does not pace its announcements
//
// Each iteration is 50 ms of flood: run it with -benchtime=40x for two
// seconds per case.
func BenchmarkRingFlood(b *testing.B) {
	unbudgeted := func(c *Config) {
		c.RingBytesPerSecond, c.RingBurstBytes = 1e12, 1<<40
		c.RingLinesPerSecond, c.RingBurstLines = 1e12, 1<<40
	}
	for _, bc := range []struct {
		name   string
		pace   time.Duration
		mutate func(*Config)
	}{
		{"before", 0, unbudgeted},
		{"budget", 20 * time.Millisecond, nil},
		{"unpaced", 0, nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			evConn, readConn := startFloodGuest(b, bc.pace)
			be := &floodBackend{conn: readConn, inst: &instance.Instance{Name: "vm1", UUID: "uuid-vm1", Config: map[string]string{}}}
			cfg := Config{Instances: be, Links: deadLinks{}, Certs: testCerts(b)}
			if bc.mutate != nil {
				bc.mutate(&cfg)
			}
			svc, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer svc.Close()
			svc.GuestRunning(be.inst, nil)
			var (
				mu     sync.Mutex
				events int
			)
			forwarded := make(chan struct{})
			go func() { // the backend's event stream: one event per announcement
				defer close(forwarded)
				buf := make([]byte, 4096)
				ev := contract.Event{UUID: be.inst.UUID, Kind: contract.EventRingData}
				for {
					n, err := evConn.Read(buf)
					for range n {
						svc.BackendEvent(be.inst, ev)
					}
					mu.Lock()
					events += n
					mu.Unlock()
					if err != nil {
						if !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
							b.Error(err)
						}
						return
					}
				}
			}()
			time.Sleep(200 * time.Millisecond) // past the budget's burst
			mu.Lock()
			ev0 := events
			mu.Unlock()
			reads0, cpu0, wall0 := be.readCount(), cpuTime(b), time.Now()
			for b.Loop() {
				time.Sleep(50 * time.Millisecond)
			}
			wall := time.Since(wall0)
			cpu := cpuTime(b) - cpu0
			reads := be.readCount() - reads0
			mu.Lock()
			evs := events - ev0
			mu.Unlock()
			evConn.Close()
			<-forwarded
			b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "%core")
			b.ReportMetric(float64(reads)/wall.Seconds(), "reads/s")
			b.ReportMetric(float64(evs)/wall.Seconds(), "events/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
