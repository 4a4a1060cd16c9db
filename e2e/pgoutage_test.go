package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/internal/testwait"
)

// rawDriverText is what a user must never read in an answer during an
// outage: SQLSTATEs and the driver's words.
var rawDriverText = []string{"SQLSTATE", "57P0", "08006", "dial ", "pgconn", "unexpected EOF", "connection refused"}

// TestPostgresOutage restarts PostgreSQL (a fast shutdown, then a crash)
// under a load of config writes through a real daemon: requests meanwhile
// get 503 with a plain reason, the daemon recovers by itself, and every
// change the API acknowledged is in the database afterwards. A stale
// pooled connection (the server ended it) is invisible to the next request.
func TestPostgresOutage(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	srv := dbtest.NewServer(t)
	d := newDaemon(t, "--database", srv.URL(t))
	if _, err := d.client.Create(ctx, api.InstancesPost{Name: "pg1", Backend: "sim"}); err != nil {
		t.Fatal(err)
	}

	// The server ends every connection: the next requests still work.
	srv.TerminateConnections(t)
	for i := range 3 {
		if _, err := d.client.UpdateConfig(ctx, "pg1", map[string]string{fmt.Sprintf("user.stale%d", i): "x"}, nil); err != nil {
			t.Errorf("config set %d after the server ended the pool's connections: %v", i, err)
		}
	}

	var (
		mu       sync.Mutex
		acked    []string
		refusals []string
		others   []error
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("user.w%d-%d", w, i)
				rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
				_, err := d.client.UpdateConfig(rctx, "pg1", map[string]string{key: "v"}, nil)
				rcancel()
				mu.Lock()
				var se *client.StatusError
				switch {
				case err == nil:
					acked = append(acked, key)
				case errors.As(err, &se) && se.Code == 503:
					refusals = append(refusals, se.Message)
				default:
					others = append(others, err)
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond) // a client backing off between tries
				}
			}
		})
	}
	ackedNow := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	waitAcks := func(n int, what string) {
		t.Helper()
		if !testwait.Until(opTimeout, func() bool { return ackedNow() >= n }) {
			t.Fatalf("%s: only %d writes acknowledged", what, ackedNow())
		}
	}
	waitAcks(20, "before the outage")
	srv.Restart(t, false)
	waitAcks(ackedNow()+20, "after a fast restart")
	srv.Restart(t, true)
	waitAcks(ackedNow()+20, "after an immediate restart")
	close(stop)
	wg.Wait()

	for _, msg := range refusals {
		for _, bad := range rawDriverText {
			if strings.Contains(msg, bad) {
				t.Errorf("a 503 during the outage shows driver text %q: %s", bad, msg)
			}
		}
	}
	for _, err := range others {
		t.Errorf("a request during the outage failed other than with 503: %v", err)
	}
	inst, err := d.client.Instance(ctx, "pg1")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range acked {
		if inst.Config[k] != "v" {
			t.Errorf("acknowledged change %s is missing after the outage", k)
		}
	}
	t.Logf("%d writes acknowledged, %d refused with 503 during the restarts", len(acked), len(refusals))
}
