package adminapi

import (
	"context"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/instance"
)

// GuestReports is what the agents report of their guests
// (core/agentmon.Service): Guest answers from a cache fresher than a few
// seconds or asks the agent, waiting at most wait; RefreshGuest answers
// from the cache and starts a refresh in the background when it is old (a
// single instance's view); CachedIPv4 reads the cache only and starts
// nothing (a list: the agents' reports are refreshed on their own
// signals, never by a list). Each answers nothing (false, nil, "") for an
// instance without a connected agent.
type GuestReports interface {
	Guest(ctx context.Context, uuid string, wait time.Duration) (*api.GuestInfo, bool)
	RefreshGuest(uuid string) *api.GuestInfo
	CachedIPv4(uuid string) string
}

// GuestStateWait is how long GET /1.0/instances/{name}/state waits for the
// agent's answer before it answers with what it knows ("guest.error" then
// says the agent is slow).
const GuestStateWait = 2 * time.Second

// guestInfo returns the guest part of an instance's state (nil without
// Guests or a connected agent).
func (a *API) guestInfo(ctx context.Context, uuid string) *api.GuestInfo {
	if a.cfg.Guests == nil {
		return nil
	}
	info, _ := a.cfg.Guests.Guest(ctx, uuid, GuestStateWait)
	return info
}

// refreshedGuest returns the cached guest part of an instance (nil when
// none) and has it refreshed in the background when old.
func (a *API) refreshedGuest(uuid string) *api.GuestInfo {
	if a.cfg.Guests == nil {
		return nil
	}
	return a.cfg.Guests.RefreshGuest(uuid)
}

// batchIPv4 is implemented by guest reports that read many guests'
// addresses at once (core/agentmon.Service): a list's batch of rows takes
// the agent service's lock once, not once per row.
type batchIPv4 interface {
	// CachedIPv4s sets dst[i] to CachedIPv4(uuids[i]).
	CachedIPv4s(uuids, dst []string)
}

// rowsIPv4 sets ips[i] to the guest address of rows[i] (listIPv4's, for a
// batch): the one its member sent, else the local agent cache's, read for
// the whole batch at once when Guests can (batchIPv4). ips and uuids (a
// scratch space) hold at least len(rows).
func (a *API) rowsIPv4(rows []instance.CachedRow, ips, uuids []string) {
	ips, uuids = ips[:len(rows)], uuids[:len(rows)]
	for i := range rows {
		uuids[i], ips[i] = rows[i].UUID, ""
	}
	switch g := a.cfg.Guests.(type) {
	case nil:
	case batchIPv4:
		g.CachedIPv4s(uuids, ips)
	default:
		for i := range ips {
			if rows[i].GuestIPv4 == "" {
				ips[i] = g.CachedIPv4(uuids[i])
			}
		}
	}
	for i := range rows {
		if rows[i].GuestIPv4 != "" {
			ips[i] = rows[i].GuestIPv4
		}
	}
}

// listIPv4 returns the guest's address for the instance list: the one its
// member sent with an instance of another member (GuestIPv4), else the
// local agent cache's (cachedIPv4).
func (a *API) listIPv4(inst *instance.Instance) string {
	if inst.GuestIPv4 != "" {
		return inst.GuestIPv4
	}
	return a.cachedIPv4(inst.UUID)
}

// cachedIPv4 returns the guest's address for the instance list, from the
// cache only: no agent call, whatever the report's age.
func (a *API) cachedIPv4(uuid string) string {
	if a.cfg.Guests == nil {
		return ""
	}
	return a.cfg.Guests.CachedIPv4(uuid)
}
