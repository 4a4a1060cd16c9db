package db_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/db/dbtest"
)

// BenchmarkDeclarationStormPostgres is BenchmarkDeclarationStorm on
// PostgreSQL (the cluster's engine; batches of 256): each op is 10,000
// goroutines, one per instance, each writing what a Ready declaration
// writes at once, through WriteChange (update=full: the whole row, by
// gorm) or WriteChangeFrom (update=narrow: the config and updated_at). It
// reports the benchmark process's CPU per declaration (the store's side:
// gorm, pgx, the writer) and the server's (the CPU time of the backends
// serving the database, from /proc), each divided by the declarations.
func BenchmarkDeclarationStormPostgres(b *testing.B) {
	for _, narrow := range []bool{false, true} {
		name := map[bool]string{false: "update=full", true: "update=narrow"}[narrow]
		b.Run(name, func(b *testing.B) { benchmarkStormPostgres(b, 10000, narrow) })
	}
}

func benchmarkStormPostgres(b *testing.B, n int, narrow bool) {
	ctx := context.Background()
	st := dbtest.Open(b, dbtest.PostgresURL(b))
	w := st.(changeFromWriter)
	full := st.(interface {
		WriteChange(ctx context.Context, in *record.Instance, entries []*record.TimelineEntry, evs []*events.Record) error
	})
	insts := make([]*record.Instance, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range insts {
		insts[i] = &record.Instance{Name: fmt.Sprintf("i%05d", i), UUID: uuid.NewString(), Backend: "sim", PowerState: "running", Boot: 1,
			Config:  map[string]string{"user.role": "web", "limits.cpu": "2", "limits.memory": "1GiB", "security.devlxd": "true"},
			Devices: map[string]map[string]string{"root": {"type": "disk"}}}
		wg.Go(func() {
			if err := st.CreateInstance(ctx, insts[i]); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	var cpu, server time.Duration
	b.ResetTimer()
	for i := range b.N {
		ready := fmt.Sprint(i%2 == 0)
		start := make(chan struct{})
		errs := make(chan error, n)
		for k, in := range insts {
			wg.Go(func() {
				<-start
				next := *in
				next.Config = maps.Clone(in.Config)
				next.Config["volatile.last_state.ready"] = ready
				ev := &events.Record{Type: "lifecycle", Instance: in.Name,
					Body: []byte(`{"type":"lifecycle","metadata":{"action":"instance-ready","source":"/1.0/instances/` + in.Name + `"}}`)}
				entries := []*record.TimelineEntry{{Boot: in.Boot, Kind: "ready", To: ready, Cause: "agent"}}
				var err error
				if narrow {
					err = w.WriteChangeFrom(ctx, in, &next, entries, []*events.Record{ev})
				} else {
					err = full.WriteChange(ctx, &next, entries, []*events.Record{ev})
				}
				if err != nil {
					errs <- err
					return
				}
				insts[k] = &next
			})
		}
		pids, err := db.BackendPIDsForBench(st)
		if err != nil {
			b.Fatal(err)
		}
		before := backendCPU(pids)
		cpu0 := selfCPU()
		close(start)
		wg.Wait()
		cpu += selfCPU() - cpu0
		if pids, err = db.BackendPIDsForBench(st); err != nil {
			b.Fatal(err)
		}
		for pid, t := range backendCPU(pids) {
			server += t - before[pid]
		}
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	calls := float64(b.N * n)
	b.ReportMetric(float64(cpu.Microseconds())/calls, "cpu-µs/decl")
	b.ReportMetric(float64(server.Microseconds())/calls, "server-cpu-µs/decl")
}

// selfCPU returns the user+system CPU time this process used so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// backendCPU returns the user+system CPU time of each process in pids
// (from /proc/PID/stat, in clock ticks of 10 ms); a process gone is left
// out.
func backendCPU(pids []int) map[int]time.Duration {
	out := make(map[int]time.Duration, len(pids))
	for _, pid := range pids {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command (which may hold spaces): state is
		// field 3, utime 14, stime 15.
		f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
		if len(f) < 13 {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		out[pid] = time.Duration(utime+stime) * 10 * time.Millisecond
	}
	return out
}
