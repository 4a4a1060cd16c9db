package e2e

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
)

// fleetGuests is how many fleet guests TestFleet200 runs.
const fleetGuests = 200

// TestFleet200 runs 200 fleet guests (one fleet host process at any usual
// open-file limit, the real agent per guest, real TLS links to the daemon)
// through launch, agent
// connected, Ready (each guest's userland declares it on its devlxd
// socket), a daemon restart (the agents reconnect, the Ready flags are
// restored) and stop.
func TestFleet200(t *testing.T) {
	if err := raiseFileLimit(); err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	config := map[string]string{"fleet.ready_after": "1s", "fleet.boot_delay": "200ms"}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range fleetGuests {
		g.Go(func() error {
			name := "f-" + strconv.Itoa(i)
			if _, err := d.client.Create(gctx, api.InstancesPost{Name: name, Backend: "fleet", Config: config, Start: true}); err != nil {
				return fmt.Errorf("creating %s: %w", name, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}

	// Agents count once their link state was entered after since (the
	// daemon's restart: an agent counts once it reconnected).
	var since time.Time
	allUp := func(list []api.Instance) (bool, string) {
		connected, ready := 0, 0
		for _, inst := range list {
			if inst.Status != "Running" && inst.Status != "Ready" {
				return false, fmt.Sprintf("%s is %s", inst.Name, inst.Status)
			}
			if inst.Agent.State == api.AgentConnected && inst.Agent.Since != nil && inst.Agent.Since.After(since) {
				connected++
			}
			if inst.Ready() {
				ready++
			}
		}
		return len(list) == fleetGuests && connected == fleetGuests && ready == fleetGuests,
			fmt.Sprintf("%d instances, %d agents connected, %d Ready", len(list), connected, ready)
	}
	waitFleet(ctx, t, d, "launch", 5*time.Minute, allUp)

	firstPID := d.pid()
	since = time.Now()
	if err := d.signal(syscall.SIGTERM, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	d.start()
	if d.pid() == firstPID {
		t.Fatal("the daemon did not restart")
	}
	waitFleet(ctx, t, d, "restart", 5*time.Minute, allUp)

	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range fleetGuests {
		g.Go(func() error {
			name := "f-" + strconv.Itoa(i)
			if _, err := d.client.SetState(gctx, name, api.InstanceStatePut{Action: "stop", Timeout: 30}); err != nil {
				return fmt.Errorf("stopping %s: %w", name, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	waitFleet(ctx, t, d, "stop", 3*time.Minute, func(list []api.Instance) (bool, string) {
		stopped := 0
		for _, inst := range list {
			if inst.Status == "Stopped" {
				stopped++
			}
		}
		return stopped == fleetGuests, fmt.Sprintf("%d of %d stopped", stopped, fleetGuests)
	})
}

// waitFleet lists the fleet's instances whenever the daemon publishes an
// event (and every few seconds, should the awaited change publish none)
// until cond holds, failing the test after within.
func waitFleet(ctx context.Context, t *testing.T, d *daemonProc, phase string, within time.Duration, cond func([]api.Instance) (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	evc, _ := d.client.Events(ctx, client.EventFilter{})
	safety := time.NewTicker(3 * time.Second)
	defer safety.Stop()
	last := "nothing listed yet"
	for {
		list, err := d.client.Instances(ctx, client.InstanceFilter{Backend: "fleet"})
		if err == nil {
			ok, why := cond(list)
			if ok {
				return
			}
			last = why
		} else {
			last = err.Error()
		}
		select {
		case <-evc:
			// Coalesce a burst of events into one listing.
			for drained := false; !drained; {
				select {
				case <-evc:
				default:
					drained = true
				}
			}
		case <-safety.C:
		case <-ctx.Done():
			t.Fatalf("%s: fleet not there within %v: %s", phase, within, last)
		}
	}
}
