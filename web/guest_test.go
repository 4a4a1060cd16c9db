package web

import (
	"net/http"
	"sync"
	"testing"

	"github.com/guestlink/guestlink/api"
)

// countingGuests answers every guest with one report and counts the
// calls that may reach an agent (RefreshGuest) apart from the cache reads
// (CachedGuest).
type countingGuests struct {
	mu              sync.Mutex
	cached, refresh map[string]int
}

func (g *countingGuests) report() *api.GuestInfo {
	return &api.GuestInfo{Features: []string{"state"}, State: &api.GuestState{OS: "Debian GNU/Linux", Network: map[string]api.GuestNetwork{
		"eth0": {Addresses: []api.GuestAddress{{Family: "inet", Address: "10.0.2.15", Netmask: "24", Scope: "global"}}},
	}}}
}

func (g *countingGuests) CachedGuest(uuid string) *api.GuestInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cached[uuid]++
	return g.report()
}

func (g *countingGuests) RefreshGuest(uuid string) *api.GuestInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refresh[uuid]++
	return g.report()
}

// TestListRowsReadCachedReports: the instances page shows each row's
// address from the cached reports and asks no refresh (a list never makes
// the daemon call agents); the instance page asks its own guest's report
// refreshed (RefreshGuest) and shows the address too.
func TestListRowsReadCachedReports(t *testing.T) {
	guests := &countingGuests{cached: map[string]int{}, refresh: map[string]int{}}
	app, _ := newTestApp(newFakeInstances(fleet(30)...), newBusEvents(), Config{Guests: guests})
	res, _, doc := get(t, app, "/instances")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("/instances: %d", res.StatusCode)
	}
	if n := doc.Find(`[data-testid="guest-address"]`).Length(); n != 30 {
		t.Errorf("%d rows show an address, want 30", n)
	}
	guests.mu.Lock()
	if len(guests.refresh) != 0 || len(guests.cached) != 30 {
		t.Errorf("the list asked %d refreshes and read %d cached reports, want 0 and 30", len(guests.refresh), len(guests.cached))
	}
	guests.mu.Unlock()

	res, _, doc = get(t, app, "/instances/guest00003")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("instance page: %d", res.StatusCode)
	}
	if got := doc.Find(`[data-testid="guest-address"]`).Text(); got != "10.0.2.15" {
		t.Errorf("instance page address %q", got)
	}
	guests.mu.Lock()
	defer guests.mu.Unlock()
	if guests.refresh["uuid-guest00003"] != 1 || len(guests.refresh) != 1 {
		t.Errorf("the instance page asked refreshes %v, want one of its own guest", guests.refresh)
	}
}
