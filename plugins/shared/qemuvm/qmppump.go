package qemuvm

import (
	"context"
	"encoding/json"
	"path/filepath"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/shared/qmp"
)

// pump turns one QMP connection's events into backend events, and emits
// EventExited when the connection closed because QEMU ended.
func (b *Backend) pump(h *handle, v *vm, c *qmp.Client) {
	names := map[string]string{}
	for _, p := range h.Layout.ports(h.Link == sdk.LinkSerial) {
		names[p.id] = p.name
	}
	// exitedAt is when QEMU went: its SHUTDOWN event's own timestamp, else
	// when the connection closed. The exit is reported only once the process
	// is gone (below), which can be after the daemon has started the guest
	// again (a stateful stop, then a start); the daemon tells a stale exit
	// by this time, so it must not be the time of the report.
	var exitedAt time.Time
	for ev := range c.Events() {
		switch ev.Name {
		case "VSERPORT_CHANGE":
			var d struct {
				ID   string `json:"id"`
				Open bool   `json:"open"`
			}
			json.Unmarshal(ev.Data, &d)
			kind := sdk.EventPortClosed
			if d.Open {
				kind = sdk.EventPortOpened
			}
			port := names[d.ID]
			if port == "" {
				port = d.ID
			}
			b.events.Emit(sdk.Event{UUID: h.UUID, Kind: kind, Port: port, Time: ev.Time})
		case "DEVICE_DELETED":
			v.deviceDeleted(ev.Data)
		case "RESET":
			b.events.Emit(sdk.Event{UUID: h.UUID, Kind: sdk.EventReset, Time: ev.Time})
		case "SHUTDOWN":
			var d struct {
				Reason string `json:"reason"`
			}
			json.Unmarshal(ev.Data, &d)
			v.mu.Lock()
			v.reason = d.Reason
			v.mu.Unlock()
			if !ev.Time.IsZero() {
				exitedAt = ev.Time
			}
		}
	}
	if exitedAt.IsZero() {
		exitedAt = time.Now()
	}
	// The connection closed: QEMU exited, or (rarely) the socket broke.
	if !waitGone(h, v, 10*time.Second) {
		v.mu.Lock()
		if v.client == c {
			v.client = nil
		}
		v.mu.Unlock()
		return
	}
	v.mu.Lock()
	reason := v.reason
	if v.client == c {
		v.client = nil
	}
	v.mu.Unlock()
	kind := exitKind(reason)
	if reason == "" {
		reason = "qemu exited"
	}
	b.log.Info("guest exited", "name", h.Name, "pid", h.PID, "reason", reason, "exit", kind)
	b.events.Emit(sdk.Event{UUID: h.UUID, Kind: sdk.EventExited, Detail: reason, Exit: kind, Time: exitedAt})
}

// exitKind classifies QEMU's end by its SHUTDOWN event's reason
// (docs/plugins.md): the guest powering itself off (guest-shutdown) or
// rebooting under -no-reboot (guest-reset) is a power-off; a guest panic,
// a host-side quit or signal, or no SHUTDOWN event at all (QEMU died) is
// a crash.
func exitKind(shutdownReason string) sdk.ExitKind {
	switch shutdownReason {
	case "guest-shutdown", "guest-reset":
		return sdk.ExitPoweroff
	}
	return sdk.ExitCrash
}

// ensureQMP returns the guest's QMP connection, connecting if needed.
func (b *Backend) ensureQMP(ctx context.Context, h *handle, v *vm) (*qmp.Client, error) {
	v.mu.Lock()
	c := v.client
	v.mu.Unlock()
	if c != nil && c.Err() == nil {
		return c, nil
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := qmp.Dial(dctx, filepath.Join(h.Dir, qmpSocket))
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	if v.client != nil && v.client.Err() == nil {
		old := v.client
		v.mu.Unlock()
		c.Close()
		return old, nil
	}
	v.client = c
	v.mu.Unlock()
	go b.pump(h, v, c)
	return c, nil
}
