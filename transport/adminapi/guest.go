package adminapi

import (
	"context"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/instance"
)

// GuestReports is what the agents report of their guests
// (core/agentmon.Service): Guest answers from a cache fresher than a few
// seconds or asks the agent, waiting at most wait; CachedGuest never asks
// (it starts a refresh in the background). Both answer nothing (false,
// nil) for an instance without a connected agent.
type GuestReports interface {
	Guest(ctx context.Context, uuid string, wait time.Duration) (*api.GuestInfo, bool)
	CachedGuest(uuid string) *api.GuestInfo
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

// cachedGuest returns the cached guest part of an instance (nil when none).
func (a *API) cachedGuest(uuid string) *api.GuestInfo {
	if a.cfg.Guests == nil {
		return nil
	}
	return a.cfg.Guests.CachedGuest(uuid)
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
// cache only: no agent round trip per row.
func (a *API) cachedIPv4(uuid string) string {
	if info := a.cachedGuest(uuid); info != nil {
		return info.State.IPv4()
	}
	return ""
}
