package devlxd

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/internal/testwait"
)

// stuckReady is an instance service whose SetReady never ends by itself,
// as a declaration's store write queued behind a storm's backlog: it
// returns when its context ends and records how it ended.
type stuckReady struct {
	Instances
	waiting   atomic.Int64
	mu        sync.Mutex
	endedWith []error
}

func (s *stuckReady) SetReady(ctx context.Context, _ string, _ bool, _ events.Requestor) error {
	s.waiting.Add(1)
	<-ctx.Done()
	s.mu.Lock()
	s.endedWith = append(s.endedWith, ctx.Err())
	s.mu.Unlock()
	return ctx.Err()
}

// TestShutdownCancelsRequestsInFlight sends 8 Ready declarations whose
// instance service call never ends, then shuts the server down with 10 s
// to spare. Shutdown must cancel the calls and return once they are
// answered (503: the guest may declare again), long
// before its deadline: the handlers' contexts were the 30 s request
// timeout's alone, so a daemon's stop waited for each such request (its
// "devlxd" step up to the stop's 20 s bound).
func TestShutdownCancelsRequestsInFlight(t *testing.T) {
	const n = 8
	stuck := &stuckReady{}
	e := newEnv(t, func(c *Config) {
		stuck.Instances = c.Instances
		c.Instances = stuck
	})
	cl := e.client(uuidA, e.agents["a"])
	statuses := make(chan int, n)
	for range n {
		go func() {
			req, err := http.NewRequest(http.MethodPatch, "https://lxd/1.0", strings.NewReader(`{"state":"Ready"}`))
			if err != nil {
				statuses <- -1
				return
			}
			resp, err := cl.Do(req)
			if err != nil {
				statuses <- -1
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	testwait.For(t, "every declaration waiting in the instance service", 30*time.Second, func() bool {
		return stuck.waiting.Load() == n
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with %d declarations in flight: %v (it waited for them)", n, err)
	}
	for range n {
		if got := <-statuses; got != http.StatusServiceUnavailable {
			t.Errorf("a declaration cut by the shutdown was answered %d, want 503", got)
		}
	}
	stuck.mu.Lock()
	defer stuck.mu.Unlock()
	for _, err := range stuck.endedWith {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("a call ended with %v, want it cancelled by Shutdown", err)
		}
	}
}

// BenchmarkShutdownKept measures Shutdown of a server holding n kept-alive
// agent connections, each with one answered GET /1.0 (what the daemon's
// "devlxd" step closes after a storm: the agents' kept connections, up to
// the default budget's 2,048, DefaultKeptMemory / KeptConnBytes), held by a
// minimal client that does not read (as a guest busy elsewhere):
// shutdown-ms.
func BenchmarkShutdownKept(b *testing.B) {
	const n = 3000
	for b.Loop() {
		b.StopTimer()
		e := newEnv(b, nil)
		conf := e.tlsConfig(e.agents["a"])
		conns := make([]*tls.Conn, 0, n)
		for range n {
			conns = append(conns, keptConn(b, e, conf))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		t0 := time.Now()
		b.StartTimer()
		err := e.srv.Shutdown(ctx)
		b.StopTimer()
		took := time.Since(t0)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(took.Milliseconds()), "shutdown-ms")
		for _, c := range conns {
			c.Close()
		}
		b.StartTimer()
	}
}
