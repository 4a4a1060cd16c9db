package daemon

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/linkhost"
	"github.com/guestlink/guestlink/link/sdnotify"
)

// notifyTimeout bounds the declaration one notification makes.
const notifyTimeout = 10 * time.Second

// bySystemd is the requestor of a declaration a guest's systemd made over
// its vsock device: the timeline's cause and the events' requestor read
// "systemd".
var bySystemd = events.Requestor{Protocol: "systemd", Address: "vsock"}

// systemdNotify turns the notifications guests' systemd sends to the
// host's notification port (linkhost.Config.Notify) into declarations:
// READY=1 declares the instance the link tied the connection to Ready, as
// the agent's PATCH /1.0 would. Nothing else declares anything: STOPPING=1
// only says that the guest begins to shut down (its power state follows
// from the backend), and a connection's end is only that.
type systemdNotify struct {
	mgr atomic.Pointer[instance.Manager] // set once the manager is built
	log *slog.Logger
}

// Notify declares id's instance Ready when m says READY=1.
func (n *systemdNotify) Notify(id linkhost.Identity, m sdnotify.Message) {
	mgr := n.mgr.Load()
	switch {
	case mgr == nil:
		return
	case m.Stopping():
		n.log.Info("guest's systemd is stopping", "instance", id.InstanceUUID)
		return
	case !m.Ready():
		n.log.Debug("guest's systemd notification", "instance", id.InstanceUUID, "fields", len(m.Fields))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
	defer cancel()
	if off, err := notifyOff(ctx, mgr, id.InstanceUUID); err != nil {
		n.log.Warn("reading the instance of a systemd READY=1", "instance", id.InstanceUUID, "err", err)
		return
	} else if off {
		n.log.Info("guest's systemd READY=1 ignored: "+instance.KeySystemdNotify+" is false", "instance", id.InstanceUUID)
		return
	}
	if err := mgr.Declare(ctx, id.InstanceUUID, instance.Declaration{State: instance.DeclaredReady}, bySystemd); err != nil {
		n.log.Warn("declaring Ready from the guest's systemd", "instance", id.InstanceUUID, "err", err)
	}
}

// notifyOff reports whether the instance's effective config (its
// profiles, then its own keys) switches systemd's READY=1 off
// (readiness.systemd_notify).
func notifyOff(ctx context.Context, mgr *instance.Manager, uuid string) (bool, error) {
	inst, err := mgr.GetByUUID(ctx, uuid)
	if err != nil {
		return false, err
	}
	cfg, _, err := mgr.Expanded(ctx, inst.Name)
	if err != nil {
		return false, err
	}
	return !instance.SystemdNotifyEnabled(cfg), nil
}

var _ linkhost.NotifyHandler = (*systemdNotify)(nil)
