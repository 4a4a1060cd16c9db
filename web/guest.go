package web

import "github.com/guestlink/guestlink/api"

// Guests are the agents' cached reports of their guests
// (core/agentmon.Service): CachedGuest never waits for an agent, and nil
// means nothing is known.
type Guests interface {
	CachedGuest(uuid string) *api.GuestInfo
}

// withGuest adds what the agent last reported to an instance's view: its
// address and OS on the list and the page.
func (d *Dashboard) withGuest(w *api.Instance) {
	if d.cfg.Guests == nil {
		return
	}
	if g := d.cfg.Guests.CachedGuest(w.UUID); g != nil {
		w.Guest, w.IPv4 = g, g.State.IPv4()
	}
}
