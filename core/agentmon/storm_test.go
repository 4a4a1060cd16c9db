package agentmon

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/agent/agenttest"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/linkhost"
	"github.com/guestlink/guestlink/core/pki"
	"github.com/guestlink/guestlink/core/statebudget"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
	"github.com/guestlink/guestlink/transport/devlxd"
)

// TestDevlxdAndRingStormRealAgent storms both state-change paths of one
// guest for a few seconds against the real daemon parts wired as
// daemon wires them (one statebudget.Budget for the devlxd server and
// the agent monitor) and the real agent: PATCH /1.0 through the guest's
// /dev/lxd/sock, and agent words in its ring. Together the accepted
// changes stay within the one budget (its burst plus its rate over the
// storm's duration), each path gets some, and the refused PATCHes are
// answered 429 as before.
func TestDevlxdAndRingStormRealAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the agent binary")
	}
	const (
		rate  = 5
		burst = 5
		storm = 3 * time.Second
	)
	budget := statebudget.New(rate, burst)
	bin, err := agenttest.BuildAgent()
	if err != nil {
		t.Fatal(err)
	}
	r := &realAgent{g: agenttest.NewGuest(t)}
	if r.store, err = pki.Open(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	r.insts = &readyInstances{fakeInstances: &fakeInstances{
		insts: map[string]*instance.Instance{}, rings: map[string]*fakeRing{}, states: map[string][]stateCall{},
	}}
	r.inst = &instance.Instance{Name: "vm1", UUID: "uuid-vm1", Config: map[string]string{}}
	ring := &fakeRing{}
	r.insts.insts[r.inst.UUID] = r.inst
	r.insts.rings[r.inst.UUID] = ring
	r.d = startBudgetDaemon(t, r.insts, r.store, budget)
	files, err := r.d.svc.GuestFiles(context.Background(), r.inst)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(r.g.Root, "run/guestlink-agent", f.Path), f.Data, os.FileMode(f.Mode)); err != nil {
			t.Fatal(err)
		}
	}
	pipeRing(t, r.g.Root, ring)
	r.ep = &contract.LinkEndpoint{Kind: contract.LinkHybrid, Path: r.g.UDS}
	r.proc = agenttest.StartAgent(t, bin, r.g, "--heartbeat", "500ms")
	r.d.svc.GuestRunning(clone(r.inst), r.ep)
	r.waitConnected(t, r.d.svc)

	changesBefore := stateChanges(r.insts.calls(r.inst.UUID))
	readyBefore := len(r.insts.readyCalls())
	start := time.Now()
	var (
		wg                sync.WaitGroup
		mu                sync.Mutex
		accepted, refused int
	)
	guest := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", r.g.Socket())
		},
	}}
	defer guest.CloseIdleConnections()
	patchErr := make(chan error, 1)
	wg.Add(1)
	go func() { // the guest's software changing its state through devlxd
		defer wg.Done()
		bodies := []string{`{"state":"Ready"}`, `{"state":"Started"}`}
		for i := 0; time.Since(start) < storm; i++ {
			req, err := http.NewRequest(http.MethodPatch, "http://lxd/1.0", strings.NewReader(bodies[i%2]))
			if err != nil {
				patchErr <- err
				return
			}
			resp, err := guest.Do(req)
			if err != nil {
				patchErr <- err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			switch resp.StatusCode {
			case http.StatusOK:
				accepted++
			case http.StatusTooManyRequests:
				refused++
			}
			mu.Unlock()
			time.Sleep(2 * time.Millisecond) // the storm's pace (500/s), not a wait for anything
		}
	}()
	words := []string{"STARTED\n", "CONNECTED\n"}
	for i := 0; time.Since(start) < storm; i++ { // the guest writing words to its ring
		ring.write(words[i%2])
		r.d.svc.BackendEvent(r.inst, contract.Event{UUID: r.inst.UUID, Kind: contract.EventRingData})
		time.Sleep(10 * time.Millisecond) // the storm's pace, not a wait for anything
	}
	wg.Wait()
	elapsed := time.Since(start)
	select {
	case err := <-patchErr:
		t.Fatalf("PATCH /1.0 on /dev/lxd/sock: %v", err)
	default:
	}

	ringChanges := stateChanges(r.insts.calls(r.inst.UUID)) - changesBefore
	devlxdChanges := len(r.insts.readyCalls()) - readyBefore
	most := burst + int(rate*elapsed.Seconds()) + 2 // a word held back and applied at the end; rounding
	t.Logf("%v: %d ring state changes, %d devlxd changes (%d PATCHes answered 429)", elapsed, ringChanges, devlxdChanges, refused)
	if total := ringChanges + devlxdChanges; total > most {
		t.Errorf("%d ring + %d devlxd = %d state changes in %v, want at most %d (one budget of %d/s, bursts of %d)",
			ringChanges, devlxdChanges, total, elapsed, most, rate, burst)
	}
	if ringChanges == 0 || devlxdChanges == 0 {
		t.Errorf("ring changes %d, devlxd changes %d: both paths should get some of the budget", ringChanges, devlxdChanges)
	}
	if devlxdChanges != accepted || refused == 0 {
		t.Errorf("%d PATCHes answered 200 for %d recorded, %d answered 429: want them equal and some refused", accepted, devlxdChanges, refused)
	}
}

// startBudgetDaemon is startDaemon with one state budget shared by the
// devlxd server and the agent monitor, as daemon wires them.
func startBudgetDaemon(t testing.TB, insts *readyInstances, store *pki.Store, budget *statebudget.Budget) *daemon {
	t.Helper()
	host, err := linkhost.New(linkhost.Config{DisableVsock: true})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := devlxd.New(devlxd.Config{Instances: insts, Certs: store, Certificate: store.Daemon().TLS, Location: "testhost", StateBudget: budget})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(host) //nolint:errcheck // ends when host closes
	svc, err := New(Config{Instances: insts, Links: host, Certs: store, FastPoll: 50 * time.Millisecond,
		ConnectedPoll: 500 * time.Millisecond, StateBudget: budget})
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{host: host, srv: srv, svc: svc}
	t.Cleanup(d.stop)
	return d
}

// stateChanges counts the recorded agent states that differ from the one
// before.
func stateChanges(calls []stateCall) int {
	n := 0
	for i, c := range calls {
		if i == 0 || c.st != calls[i-1].st {
			n++
		}
	}
	return n
}
