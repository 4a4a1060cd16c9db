package components

import (
	"testing"

	"github.com/guestlink/guestlink/api"
)

// TestGuestSummary renders the guest's address and OS on the instance list
// and page when the agent reported them, and nothing when it did not.
func TestGuestSummary(t *testing.T) {
	g := &api.GuestInfo{Features: []string{"files", "state"}, State: &api.GuestState{
		OS: "Debian GNU/Linux", OSVersion: "12 (bookworm)", Hostname: "web1",
		Network: map[string]api.GuestNetwork{"eth0": {Addresses: []api.GuestAddress{{Family: "inet", Address: "10.0.2.15", Netmask: "24", Scope: "global"}}}},
	}}
	i := inst("web1", "Ready", "connected")
	i.Guest, i.IPv4 = g, g.State.IPv4()
	row := rowOf(t, i)
	if got := row.Find(`[data-testid="guest-address"]`).Text(); got != "10.0.2.15" {
		t.Errorf("list address %q", got)
	}
	if got := row.Find(`[data-testid="guest-os"]`).Text(); got != "Debian GNU/Linux 12 (bookworm)" {
		t.Errorf("list OS %q", got)
	}
	page := render(t, InstancePage(InstanceData{Meta: Meta{Now: now}, Inst: i}))
	for id, want := range map[string]string{"guest-address": "10.0.2.15", "guest-os": "Debian GNU/Linux 12 (bookworm)", "guest-hostname": "web1"} {
		if got := page.Find(`[data-testid="` + id + `"]`).Text(); got != want {
			t.Errorf("page %s = %q, want %q", id, got, want)
		}
	}
	bare := rowOf(t, inst("db1", "Stopped", ""))
	if n := bare.Find(`[data-testid="guest-address"], [data-testid="guest-os"]`).Length(); n != 0 {
		t.Errorf("an instance without a report shows %d guest facts", n)
	}
}
