package instance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/guestlink/guestlink/errdefs"
)

// FSFreezer freezes a running guest's filesystems through its agent around
// a snapshot (core/agentmon implements it). FreezeFS returns the mount
// points frozen; its errors say why the guest could not be frozen:
// errdefs.ErrConflict (no CONNECTED agent), errdefs.ErrForbidden (the
// guest's admin switched "freeze" off), errdefs.ErrNotSupported (the agent
// cannot freeze, e.g. a simulated guest), others (the freeze failed; the
// agent undid it). ThawFS thaws; expired reports that the agent had thawed
// by itself at the freeze's timeout before the call.
type FSFreezer interface {
	FreezeFS(ctx context.Context, uuid string, timeout time.Duration) (frozen []string, err error)
	ThawFS(ctx context.Context, uuid string) (expired bool, err error)
}

// Snapshot consistencies (Snapshot.Consistency).
const (
	// ConsistencyFilesystem: the guest's filesystems were frozen through
	// its agent while the snapshot was taken.
	ConsistencyFilesystem = "filesystem"
	// ConsistencyCrash: the guest ran and was not frozen: its disks are as
	// a power cut would leave them (ConsistencyDetail says why).
	ConsistencyCrash = "crash"
	// ConsistencyStopped: the guest was not running; its disks are as its
	// last stop left them.
	ConsistencyStopped = "stopped"
)

// Timeouts of a freeze around a snapshot.
const (
	// FreezeTimeout is how long the agent keeps the filesystems frozen at
	// most: it thaws by itself after it, whatever happens to the daemon.
	// A QEMU backend pauses the guest while it copies the disks, so the
	// guest's own clock, which the agent's timeout runs on, barely moves
	// meanwhile.
	FreezeTimeout = 2 * time.Minute
	// freezeCallTimeout bounds the freeze and the thaw requests.
	freezeCallTimeout = 90 * time.Second
)

// SnapshotOptions says how to take a snapshot.
type SnapshotOptions struct {
	// Stateful also saves the running guest's memory state (a stateful
	// snapshot is never frozen: its memory state is restored as it was).
	Stateful bool
	// NoFreeze takes the snapshot of a running guest without freezing its
	// filesystems (crash-consistent).
	NoFreeze bool
}

// freezeReason turns a FreezeFS error into the snapshot's consistency
// detail.
func freezeReason(err error) string {
	switch {
	case errors.Is(err, errdefs.ErrForbidden):
		return "not frozen: freeze is switched off in the guest (features.freeze in /etc/guestlink-agent.yaml)"
	case errors.Is(err, errdefs.ErrNotSupported), errors.Is(err, errdefs.ErrConflict):
		// The agent cannot freeze, went away since, or holds a freeze
		// already: its own words.
		return "not frozen: " + err.Error()
	}
	return "not frozen: the freeze failed: " + err.Error()
}

// freezeForSnapshot freezes the guest of a running instance unless opts or
// the lack of a freezer say not to. It returns the thaw to run once the
// backend's snapshot is taken (nil when nothing was frozen), and the
// consistency and its detail as they stand before the thaw.
func (m *Manager) freezeForSnapshot(ctx context.Context, uuid string, running bool, agent AgentState, opts SnapshotOptions) (thaw func() (string, string), consistency, detail string) {
	switch {
	case !running:
		return nil, ConsistencyStopped, "the guest was not running"
	case opts.Stateful:
		return nil, ConsistencyCrash, "not frozen: a stateful snapshot keeps the guest's memory as it was"
	case opts.NoFreeze:
		return nil, ConsistencyCrash, "not frozen: --no-freeze"
	case m.freezer == nil:
		return nil, ConsistencyCrash, "not frozen: this daemon reaches no agents"
	case agent != AgentConnected:
		if agent == AgentNone {
			return nil, ConsistencyCrash, "not frozen: the guest has no agent"
		}
		return nil, ConsistencyCrash, fmt.Sprintf("not frozen: the guest's agent is not connected (agent %s)", agent)
	}
	fctx, cancel := context.WithTimeout(ctx, freezeCallTimeout)
	defer cancel()
	frozen, err := m.freezer.FreezeFS(fctx, uuid, FreezeTimeout)
	if err != nil {
		return nil, ConsistencyCrash, freezeReason(err)
	}
	what := fmt.Sprintf("frozen through the agent: %s", strings.Join(frozen, " "))
	if len(frozen) == 0 {
		// Nothing could be frozen (say, every filesystem read-only or
		// unfreezable): the disks are as consistent as a crash leaves them.
		what = "not frozen: the guest has no filesystem that can be frozen"
	}
	thaw = func() (string, string) {
		// Its own context: the thaw runs whatever happened to the request.
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), freezeCallTimeout)
		defer cancel()
		expired, err := m.freezer.ThawFS(tctx, uuid)
		switch {
		case err != nil:
			return ConsistencyCrash, "frozen, but the thaw failed (the agent thaws at its timeout): " + err.Error()
		case expired:
			return ConsistencyCrash, fmt.Sprintf("not frozen throughout: the agent thawed at the freeze's timeout (%s) before the snapshot was taken", FreezeTimeout)
		case len(frozen) == 0:
			return ConsistencyCrash, what
		}
		return ConsistencyFilesystem, what
	}
	return thaw, ConsistencyCrash, what
}
