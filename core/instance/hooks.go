package instance

import (
	"context"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// ConfigChange is one changed config key ("" Value means unset).
type ConfigChange struct {
	Key      string
	OldValue string
	Value    string
}

// Hooks are the runtime services the manager tells about guests: the agent
// monitor and the guest-link services (core/agentmon, core/linkhost,
// transport/devlxd) implement them. Calls are made from the manager's goroutines
// and must not block for long; implementations hand work to their own
// goroutines.
type Hooks interface {
	// GuestRunning is called when an instance's guest runs: after a start,
	// and for every running instance after the daemon or its plugin
	// restarted (Recover). It may be called again for the same boot.
	GuestRunning(inst *Instance, ep *contract.LinkEndpoint)
	// GuestStopped is called when an instance's guest stopped or was deleted.
	GuestStopped(inst *Instance)
	// GuestReset is called when the guest rebooted without its process ending.
	GuestReset(inst *Instance)
	// BackendEvent is called for every backend event of a running instance
	// (ring data, serial port open/close), so the agent monitor reads the
	// ring buffer when something happened. For the wake-up hints
	// (contract.EventRingData, EventPortOpened, EventPortClosed: one per guest
	// and heartbeat) inst holds only the instance's Name, UUID and Backend,
	// not a full view: copying the config, devices and conditions of every
	// guest at every heartbeat was a tenth of an idle daemon's CPU.
	BackendEvent(inst *Instance, ev contract.Event)
	// ConfigChanged is called after a running instance's config changed.
	ConfigChanged(inst *Instance, changes []ConfigChange)
}

// FilesProvider gives the files of an instance's config drive (agent
// certificate and key, the daemon's certificate, agent.conf...). The manager
// calls it before every start and passes the files in the GuestSpec; core/agentmon
// implements it.
type FilesProvider interface {
	GuestFiles(ctx context.Context, inst *Instance) ([]contract.File, error)
}

// DeleteHooks is an optional interface of Hooks: InstanceDeleted is called
// once an instance is gone (store, backend, events), so that services drop
// what they keep per instance (its key pairs, its link). It runs after
// GuestStopped for an instance that was running.
type DeleteHooks interface {
	InstanceDeleted(inst *Instance)
}

// ExitHooks is an optional interface of Hooks: GuestExiting is called when
// a running guest's process has ended (a stop the manager asked for, or the
// guest powering off on its own), before the manager records it, so that
// the agent monitor takes in the guest's last ring words first (an agent's
// STOPPED, written just before the power-off). It returns once they are
// taken in, or when ctx ends (at most ExitingTimeout); it must not call
// back into the manager's operations on the instance, only record agent
// states (SetAgentState), which the manager accepts until the stop is
// recorded.
type ExitHooks interface {
	GuestExiting(ctx context.Context, inst *Instance)
}

// ExitingTimeout bounds Hooks.GuestExiting: a read of the ring's last
// bytes from a plugin, which keeps them after the guest's process ended.
const ExitingTimeout = 2 * time.Second
