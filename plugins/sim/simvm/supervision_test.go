package simvm

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testwait"
)

func TestVMMStartFailures(t *testing.T) {
	t.Run("bad config", func(t *testing.T) {
		p := vmmDir(t)
		if err := os.WriteFile(p.Config(), []byte(`{"command":"true","layout":"nope","ring_size":16}`), 0o600); err != nil {
			t.Fatal(err)
		}
		exe, _ := os.Executable()
		_, err := Launch(context.Background(), exe, p, os.Environ())
		if err == nil || !strings.Contains(err.Error(), "unknown layout") {
			t.Fatalf("Launch = %v, want the config error", err)
		}
		if rec, err := ReadExitRecord(p); err != nil || rec.Reason != ReasonError {
			t.Fatalf("exit record = %+v, %v", rec, err)
		}
	})
	t.Run("bad ring size", func(t *testing.T) {
		p := vmmDir(t)
		WriteConfig(p, &Config{Command: "true", Layout: LayoutCurrent, RingSize: 24})
		exe, _ := os.Executable()
		if _, err := Launch(context.Background(), exe, p, os.Environ()); err == nil || !strings.Contains(err.Error(), "power of two") {
			t.Fatalf("Launch = %v", err)
		}
	})
	t.Run("not a vmm binary", func(t *testing.T) {
		p := vmmDir(t)
		WriteConfig(p, &Config{Command: "true", Layout: LayoutCurrent, RingSize: 16})
		if _, err := Launch(context.Background(), "/bin/true", p, os.Environ()); err == nil {
			t.Fatal("Launch of /bin/true succeeded")
		}
	})
	t.Run("no vmm", func(t *testing.T) {
		p := vmmDir(t)
		if _, err := NewClient(p).Status(context.Background()); !errors.Is(err, ErrNotRunning) {
			t.Fatalf("Status = %v, want ErrNotRunning", err)
		}
	})
}

func TestVMMSigtermQuits(t *testing.T) {
	p := vmmDir(t)
	c, sub := launch(t, p, Config{Name: "g", UUID: "u", Layout: LayoutCurrent, RingSize: 16, Command: "exec sleep 1000"})
	st := cont(t, c)
	if err := syscall.Kill(st.VMMPID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, sub, EventExited)
	var rec ExitRecord
	if err := json.Unmarshal(ev.Data, &rec); err != nil || rec.Reason != ReasonQuit || !strings.Contains(rec.Message, "terminated") {
		t.Fatalf("EXITED %s: %v", ev.Data, err)
	}
	waitGone(t, c)
	if err := syscall.Kill(st.GuestPID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("guest %d survived its vmm: %v", st.GuestPID, err)
	}
}

func TestSecondVMMRefused(t *testing.T) {
	p := vmmDir(t)
	cfg := Config{Name: "g", UUID: "u", Layout: LayoutCurrent, RingSize: 16, Command: "exec sleep 1000"}
	c, _ := launch(t, p, cfg)
	st := cont(t, c)
	exe, _ := os.Executable()
	_, err := Launch(context.Background(), exe, p, os.Environ())
	if err == nil || !strings.Contains(err.Error(), ErrBusy.Error()) {
		t.Fatalf("second Launch = %v, want %v", err, ErrBusy)
	}
	got, err := c.Status(context.Background())
	if err != nil || got.VMMPID != st.VMMPID || got.State != StateRunning {
		t.Fatalf("first vmm after a refused second one: %+v, %v", got, err)
	}
	if _, err := ReadExitRecord(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused vmm wrote an exit record: %v", err)
	}
}

func TestPowerOffKillsEscapedProcesses(t *testing.T) {
	p := vmmDir(t)
	// The child leaves the guest's process group (setsid) but keeps its
	// environment; the guest command then exits.
	cmd := `setsid sleep 1000 & echo $! > "$GUESTLINK_ROOT/child"; while [ ! -s "$GUESTLINK_ROOT/child" ]; do :; done; exit 0`
	c, sub := launch(t, p, Config{Name: "g", UUID: "u", Layout: LayoutCurrent, RingSize: 16, Command: cmd})
	cont(t, c)
	nextEvent(t, sub, EventExited)
	waitGone(t, c)
	data, err := os.ReadFile(filepath.Join(p.Root(), "child"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("guest pid %q: %v", data, err)
	}
	// Gone, or a zombie waiting for init.
	if err := testwait.ProcessExit(pid, 30*time.Second); err != nil {
		t.Fatalf("process %d escaped the guest's power-off: %v", pid, err)
	}
}

// envNoInotify makes the test binary's VMM fail to get an inotify instance.
const envNoInotify = "SIMVM_TEST_NO_INOTIFY"

// TestVMMWithoutInotify runs a VMM whose inotify instance cannot be had (the
// per-user limit reached): it must run, deliver ring data and its events,
// and say once in its log that port events are off.
func TestVMMWithoutInotify(t *testing.T) {
	t.Setenv(envNoInotify, "1")
	p := vmmDir(t)
	port := `"$GUESTLINK_ROOT/dev/virtio-ports/com.canonical.lxd"`
	c, sub := launch(t, p, Config{Name: "g", UUID: "u", Layout: LayoutCurrent, RingSize: 64,
		Command: `printf 'STARTED\n' > ` + port + `; exec sleep 1000`})
	cont(t, c)
	// The guest opened the port, wrote and closed it: the ring-data event
	// comes, and no port change before it.
	seen := make(chan []string, 1)
	go func() {
		var names []string
		for {
			ev, err := sub.Next()
			if err != nil {
				seen <- append(names, err.Error())
				return
			}
			names = append(names, ev.Event)
			if ev.Event == EventRingData {
				seen <- names
				return
			}
		}
	}()
	select {
	case names := <-seen:
		if names[len(names)-1] != EventRingData || slices.Contains(names, EventPortChange) {
			t.Fatalf("events %v, want %s and no %s", names, EventRingData, EventPortChange)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s event", EventRingData)
	}
	waitReceived(t, c, 8)
	if data, err := c.ReadRing(context.Background(), 100); err != nil || string(data) != "STARTED\n" {
		t.Fatalf("ringbuf-read = %q, %v", data, err)
	}
	logData, err := os.ReadFile(p.VMMLog())
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(logData), "running without port open/close events"); n != 1 {
		t.Fatalf("vmm log says %d times that port events are off, want once:\n%s", n, logData)
	}
}

func TestPortChangeEvents(t *testing.T) {
	p := vmmDir(t)
	c, sub := launch(t, p, Config{Name: "g", UUID: "u", Layout: LayoutCurrent, RingSize: 16, Command: "exec sleep 1000"})
	cont(t, c)
	f, err := os.OpenFile(p.Port(PortCurrent), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("STARTED\n")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, want := range []bool{true, false} {
		ev := nextEvent(t, sub, EventPortChange)
		var pc PortChange
		if err := json.Unmarshal(ev.Data, &pc); err != nil || pc.Port != PortCurrent || pc.Open != want {
			t.Fatalf("PORT_CHANGE %s, want open=%v: %v", ev.Data, want, err)
		}
	}
}

// TestConn checks the connection-keeping client: one connection for a
// series of commands, concurrent callers, and a fresh connection after the
// VMM restarted.
func TestConn(t *testing.T) {
	p := vmmDir(t)
	cfg := Config{Name: "g", UUID: "u", Layout: LayoutCurrent, RingSize: 4096, Command: "exec sleep 1000"}
	c, _ := launch(t, p, cfg)
	cont(t, c)
	conn := NewConn(p)
	t.Cleanup(func() { conn.Close() })
	ctx := context.Background()

	t.Run("kept", func(t *testing.T) {
		if _, err := conn.ReadRing(ctx, 16); err != nil {
			t.Fatal(err)
		}
		first := conn.idle
		for range 10 {
			if _, err := conn.ReadRing(ctx, 16); err != nil {
				t.Fatal(err)
			}
		}
		if first == nil || conn.idle != first {
			t.Fatalf("kept connection %p, then %p: want the same one", first, conn.idle)
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		const n = 400
		want := strings.Repeat("x", n)
		f, err := os.OpenFile(p.Port(PortCurrent), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(want); err != nil {
			t.Fatal(err)
		}
		f.Close()
		waitReceived(t, c, n)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var got strings.Builder
		for range 8 {
			wg.Go(func() {
				for range n / 8 {
					data, err := conn.ReadRing(ctx, 1)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					got.Write(data)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if got.String() != want {
			t.Fatalf("read %d bytes concurrently, want %d", got.Len(), n)
		}
	})
	t.Run("vmm restarted", func(t *testing.T) {
		if err := c.Execute(ctx, CmdQuit, nil, nil); err != nil {
			t.Fatal(err)
		}
		waitGone(t, c)
		if _, err := NewConn(p).ReadRing(ctx, 16); !errors.Is(err, ErrNotRunning) {
			t.Fatalf("ReadRing with the vmm gone = %v, want ErrNotRunning", err)
		}
		if conn.idle == nil {
			t.Fatal("no kept connection")
		}
		c2, _ := launch(t, p, cfg)
		cont(t, c2)
		if _, err := conn.ReadRing(ctx, 16); err != nil {
			t.Fatalf("ReadRing after the vmm restarted: %v", err)
		}
	})
}

// BenchmarkReadRing compares a ringbuf-read on a fresh connection (Client)
// with one on the kept connection (Conn).
func BenchmarkReadRing(b *testing.B) {
	p := Paths{Dir: b.TempDir()}
	cfg := Config{Name: "g", UUID: "u", Layout: LayoutCurrent, RingSize: 4096, Command: "exec sleep 1000"}
	if err := WriteConfig(p, &cfg); err != nil {
		b.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := Launch(ctx, exe, p, os.Environ()); err != nil {
		b.Fatal(err)
	}
	c := NewClient(p)
	defer func() {
		_ = c.Execute(ctx, CmdQuit, nil, nil)
		_ = WaitUnlocked(ctx, p)
	}()
	if err := c.Execute(ctx, CmdCont, nil, nil); err != nil {
		b.Fatal(err)
	}
	conn := NewConn(p)
	defer conn.Close()
	for _, r := range []struct {
		name string
		read func(context.Context, int) ([]byte, error)
	}{{"dial-per-read", c.ReadRing}, {"kept-connection", conn.ReadRing}} {
		b.Run(r.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := r.read(ctx, 16); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/read")
		})
	}
}
