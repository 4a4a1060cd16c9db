package web

import "github.com/guestlink/guestlink/api"

// Guests are the agents' cached reports of their guests
// (core/agentmon.Service): neither waits for an agent, and nil means
// nothing is known. CachedGuest starts nothing (a list's rows: the reports
// are refreshed on the agents' own signals); RefreshGuest has an old
// report refreshed in the background (an instance's page).
type Guests interface {
	CachedGuest(uuid string) *api.GuestInfo
	RefreshGuest(uuid string) *api.GuestInfo
}

// withGuest adds what the agent last reported to a list row's view: its
// address and OS, from the cache alone.
func (d *Dashboard) withGuest(w *api.Instance) {
	if d.cfg.Guests == nil {
		return
	}
	if g := d.cfg.Guests.CachedGuest(w.UUID); g != nil {
		w.Guest, w.IPv4 = g, g.State.IPv4()
	}
}

// withFreshGuest is withGuest for an instance's own page: an old report is
// refreshed in the background, so the page knows more the next time.
func (d *Dashboard) withFreshGuest(w *api.Instance) {
	if d.cfg.Guests == nil {
		return
	}
	if g := d.cfg.Guests.RefreshGuest(w.UUID); g != nil {
		w.Guest, w.IPv4 = g, g.State.IPv4()
	}
}
