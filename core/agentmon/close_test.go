package agentmon

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/pki"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// stuckGuests are running instances whose ring reads never answer: a
// read returns only when its context ends, and counts how it ended.
type stuckGuests struct {
	contract.Backend // only ReadRing is used
	mu               sync.Mutex
	insts            map[string]*instance.Instance
	reading          atomic.Int64 // reads waiting now
	cancelled        atomic.Int64 // reads ended by a cancel
	timedOut         atomic.Int64 // reads ended by their timeout
}

func (g *stuckGuests) ReadRing(ctx context.Context, _ contract.Handle, _ int) ([]byte, error) {
	g.reading.Add(1)
	defer g.reading.Add(-1)
	<-ctx.Done()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		g.timedOut.Add(1)
	} else {
		g.cancelled.Add(1)
	}
	return nil, ctx.Err()
}

func (g *stuckGuests) GetByUUID(_ context.Context, uuid string) (*instance.Instance, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.insts[uuid], nil
}

func (g *stuckGuests) SetAgentState(context.Context, string, instance.AgentState, time.Time) error {
	return nil
}

func (g *stuckGuests) Runtime(context.Context, string) (contract.Backend, contract.Handle, error) {
	return g, contract.Handle("h"), nil
}

// stuckLinks are guest links whose agents never answer a dial: it returns
// only when its context ends.
type stuckLinks struct {
	deadLinks
	dialing atomic.Int64
}

func (l *stuckLinks) DialAgent(ctx context.Context, _ string) (net.Conn, error) {
	l.dialing.Add(1)
	defer l.dialing.Add(-1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestCloseDoesNotWaitOnIdleWork starts monitors of 300 guests whose ring
// reads and agent dials hang (a plugin or agents that do not answer, as
// under a storm's load), and closes the service while every one of them
// waits. Close must cancel that work and return at once: in synctest's
// time it takes none, where waiting for each call's RequestTimeout took

// newStuckService returns a Service whose guests' ring reads and agent
// dials never end by themselves (stuckGuests, stuckLinks) and monitors of
// n running guests. They share one name: the key pairs are vm1's (made by
// certs, outside any synctest bubble); the monitors are per UUID.
func newStuckService(tb testing.TB, certs *pki.Store, n int) (*Service, *stuckGuests, *stuckLinks) {
	tb.Helper()
	g := &stuckGuests{insts: map[string]*instance.Instance{}}
	links := &stuckLinks{}
	svc, err := New(Config{Instances: g, Links: links, Certs: certs, RequestTimeout: time.Minute})
	if err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		inst := &instance.Instance{Name: "vm1", UUID: "uuid-" + strconv.Itoa(i), Backend: "qemu", Config: map[string]string{}}
		g.mu.Lock()
		g.insts[inst.UUID] = inst
		g.mu.Unlock()
		svc.GuestRunning(inst, nil)
	}
	return svc, g, links
}

// the timeout (and, at 10,000 guests, a daemon's stop took 22 – 61 s).
func TestCloseDoesNotWaitOnIdleWork(t *testing.T) {
	const guests = 300
	certs := testCerts(t)
	synctest.Test(t, func(t *testing.T) {
		svc, g, links := newStuckService(t, certs, guests)
		synctest.Wait() // every monitor is blocked in its read and its dial
		if r, d := g.reading.Load(), links.dialing.Load(); r != guests || d != guests {
			t.Fatalf("%d ring reads and %d agent dials waiting, want %d of each", r, d, guests)
		}
		start := time.Now()
		if err := svc.Close(); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != 0 {
			t.Fatalf("Close took %v of synctest time: it waited for per-guest timeouts", took)
		}
		synctest.Wait()
		if c, to := g.cancelled.Load(), g.timedOut.Load(); c != guests || to != 0 {
			t.Fatalf("%d reads cancelled, %d timed out; want %d cancelled", c, to, guests)
		}
		if d := links.dialing.Load(); d != 0 {
			t.Fatalf("%d agent dials still waiting after Close", d)
		}
	})
}
