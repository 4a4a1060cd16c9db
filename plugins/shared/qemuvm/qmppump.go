package qemuvm

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"syscall"
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
			first := v.reason == ""
			if first {
				// The boot's first: the quit that follows a power-off
				// (afterShutdown) sends its own SHUTDOWN.
				v.reason = d.Reason
			}
			v.mu.Unlock()
			if first && !ev.Time.IsZero() {
				exitedAt = ev.Time
			}
			if d.Reason != "host-qmp-quit" {
				// Under -no-shutdown QEMU stays, paused, until told to quit.
				b.afterShutdown(h, v, c)
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

// shutdownGrace bounds the ring's last read and the quit after a guest
// powered off.
const shutdownGrace = 5 * time.Second

// afterShutdown ends the QEMU of a guest that shut down (powered off, or a
// host signal): QEMU runs with -no-shutdown, so it is still there, paused,
// with the ring's last bytes; they are read and kept for ReadRing (an
// agent's STOPPED, written just before the power-off, would otherwise go
// with QEMU before the daemon's next read), then QEMU is told to quit.
func (b *Backend) afterShutdown(h *handle, v *vm, c *qmp.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if data, err := readRingQMP(ctx, c, RingSize); err != nil {
		b.log.Warn("reading the ring after the guest shut down", "name", h.Name, "error", err)
	} else if len(data) > 0 {
		v.keepDrained(data)
	}
	if err := c.Execute(ctx, "quit", nil, nil); err != nil && !errors.Is(err, qmp.ErrClosed) {
		b.log.Warn("QMP quit after the guest shut down failed, killing QEMU", "name", h.Name, "pid", h.PID, "error", err)
		if h.running() {
			syscall.Kill(h.PID, syscall.SIGKILL)
		}
	}
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
	// A guest that powered off while no connection was there to hear its
	// SHUTDOWN (the plugin restarted meanwhile) waits, paused, to be ended.
	var st struct {
		Status string `json:"status"`
	}
	if err := c.Execute(ctx, "query-status", nil, &st); err == nil && st.Status == "shutdown" {
		v.mu.Lock()
		if v.reason == "" {
			v.reason = "guest-shutdown"
		}
		v.mu.Unlock()
		b.log.Info("guest found powered off, ending QEMU", "name", h.Name, "pid", h.PID)
		go b.afterShutdown(h, v, c)
	}
	return c, nil
}
