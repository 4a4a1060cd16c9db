package db_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/db/dbtest"
)

// durabilityEnv carries the database URL to the re-executed test binary.
const durabilityEnv = "GUESTLINK_DB_DURABILITY_URL"

// TestDurability runs a child process that writes from several goroutines
// and prints every acknowledged write, SIGKILLs it right after an
// acknowledgement, and checks that every acknowledged write is stored.
func TestDurability(t *testing.T) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			url := e.URL(t)
			ctx := testContext(t)
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDurabilityChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), durabilityEnv+"="+url)
			cmd.Stderr = os.Stderr
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			const killAfter = 400
			type ack struct {
				kind   string
				id     int64
				detail string
			}
			var acks []ack
			killed := false
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) != 4 || f[0] != "ACK" {
					continue
				}
				id, err := strconv.ParseInt(f[2], 10, 64)
				if err != nil {
					t.Fatalf("bad ack line %q", sc.Text())
				}
				acks = append(acks, ack{f[1], id, f[3]})
				if len(acks) == killAfter && !killed {
					killed = true
					if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
						t.Fatal(err)
					}
				}
			}
			werr := cmd.Wait()
			if !killed {
				t.Fatalf("child ended after %d acks without being killed: %v", len(acks), werr)
			}
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("child did not die of SIGKILL: %v", werr)
			}

			s := dbtest.Open(t, url)
			in, err := s.GetInstance(ctx, "durable")
			if err != nil {
				t.Fatalf("instance the child created: %v", err)
			}
			entries, err := s.ListTimeline(ctx, in.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			timeline := map[int64]string{}
			for _, e := range entries {
				timeline[e.ID] = e.Detail
			}
			evs, err := s.EventsAfter(ctx, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			events := map[int64]string{}
			for _, ev := range evs {
				events[ev.ID] = string(ev.Body)
			}
			lost := 0
			for _, a := range acks {
				var got string
				var ok bool
				switch a.kind {
				case "T":
					got, ok = timeline[a.id]
				case "E":
					got, ok = events[a.id]
				}
				if !ok || got != a.detail {
					lost++
					if lost <= 5 {
						t.Errorf("acknowledged %s write %d (%s) lost or changed: got %q, %v", a.kind, a.id, a.detail, got, ok)
					}
				}
			}
			if lost > 0 {
				t.Errorf("%d of %d acknowledged writes lost", lost, len(acks))
			}
			t.Logf("%d acknowledged writes before SIGKILL, %d timeline entries and %d events stored", len(acks), len(entries), len(evs))
		})
	}
}

// TestDurabilityChild is the child half of TestDurability; it does nothing
// unless started by it.
func TestDurabilityChild(t *testing.T) {
	url := os.Getenv(durabilityEnv)
	if url == "" {
		t.Skip("child of TestDurability only")
	}
	ctx := context.Background()
	s, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	in := newInstance("durable")
	if err := s.CreateInstance(ctx, in); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ackLine := func(kind string, id int64, detail string) {
		// One write(2) per line, after the call returned: the parent may
		// kill us at any moment after reading it.
		line := fmt.Sprintf("ACK %s %d %s\n", kind, id, detail)
		mu.Lock()
		_, err := os.Stdout.WriteString(line)
		mu.Unlock()
		if err != nil {
			os.Exit(3)
		}
	}
	for g := range 8 {
		go func() {
			for i := 0; ; i++ {
				detail := fmt.Sprintf("g%d-%d", g, i)
				if i%2 == 0 {
					e := &record.TimelineEntry{InstanceID: in.ID, Kind: "state", To: "running", Detail: detail}
					if err := s.AppendTimeline(ctx, e); err != nil {
						fmt.Fprintln(os.Stderr, "child:", err)
						os.Exit(2)
					}
					ackLine("T", e.ID, detail)
				} else {
					ev := &events.Record{Type: "lifecycle", Body: []byte(detail)}
					if err := s.AppendEvent(ctx, ev); err != nil {
						fmt.Fprintln(os.Stderr, "child:", err)
						os.Exit(2)
					}
					ackLine("E", ev.ID, detail)
				}
			}
		}()
	}
	// The parent kills us; never return on our own (the writers run on,
	// so this is no deadlock; -timeout ends a child whose parent vanished).
	select {}
}
