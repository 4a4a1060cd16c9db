package simbackend

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sim/simvm"
)

// watcher holds one VMM's event subscription and forwards its events to
// every open Events stream.
type watcher struct {
	h    *handle
	sub  *simvm.Subscription
	ctl  *simvm.Conn // kept control connection for ReadRing, closed with the watch
	done chan struct{}
	// closed is set by Close: the subscription ends because this process
	// lets go of the VMM, not because the VMM went away.
	closed atomic.Bool
}

// watch subscribes to the events of h's VMM unless a subscription is
// already open. It is idempotent.
func (b *Backend) watch(ctx context.Context, h *handle) error {
	b.mu.Lock()
	if w, ok := b.watchers[h.Dir]; ok {
		select {
		case <-w.done:
		default:
			b.mu.Unlock()
			return nil
		}
	}
	b.mu.Unlock()
	sub, err := simvm.NewClient(h.paths()).Subscribe(ctx)
	if err != nil {
		return err
	}
	w := &watcher{h: h, sub: sub, ctl: simvm.NewConn(h.paths()), done: make(chan struct{})}
	b.mu.Lock()
	if old, ok := b.watchers[h.Dir]; ok {
		select {
		case <-old.done:
		default: // lost a race with another watch: keep the first
			b.mu.Unlock()
			sub.Close()
			return nil
		}
	}
	b.watchers[h.Dir] = w
	b.mu.Unlock()
	go b.forward(w)
	return nil
}

// forward turns VMM events into backend events until the VMM closes the
// subscription. A VMM that goes away without announcing EXITED was killed:
// forward then reports EXITED itself, with what is known.
func (b *Backend) forward(w *watcher) {
	defer func() {
		b.mu.Lock()
		if b.watchers[w.h.Dir] == w {
			delete(b.watchers, w.h.Dir)
		}
		b.mu.Unlock()
		close(w.done)
		w.sub.Close()
		w.ctl.Close()
	}()
	exited := false
	for {
		ev, err := w.sub.Next()
		if err != nil {
			break
		}
		out := sdk.Event{UUID: w.h.UUID, Time: ev.Timestamp.Time()}
		switch ev.Event {
		case simvm.EventRingData:
			var d simvm.RingData
			_ = json.Unmarshal(ev.Data, &d)
			out.Kind, out.Port = sdk.EventRingData, d.Port
		case simvm.EventPortChange:
			var pc simvm.PortChange
			_ = json.Unmarshal(ev.Data, &pc)
			out.Kind, out.Port = sdk.EventPortClosed, pc.Port
			if pc.Open {
				out.Kind = sdk.EventPortOpened
			}
		case simvm.EventReset:
			out.Kind = sdk.EventReset
		case simvm.EventExited:
			var rec simvm.ExitRecord
			_ = json.Unmarshal(ev.Data, &rec)
			out.Kind, out.Detail, out.Exit = sdk.EventExited, exitDetail(&rec), exitKind(&rec)
			exited = true
		default:
			continue
		}
		b.events.Emit(out)
	}
	if exited || w.closed.Load() {
		return
	}
	detail, kind := "vmm ended unexpectedly", sdk.ExitCrash
	if rec, err := simvm.ReadExitRecord(w.h.paths()); err == nil {
		detail, kind = exitDetail(rec), exitKind(rec)
	}
	b.log.Warn("vmm connection lost without an exit event", "dir", w.h.Dir, "detail", detail)
	b.events.Emit(sdk.Event{UUID: w.h.UUID, Kind: sdk.EventExited, Detail: detail, Exit: kind, Time: time.Now()})
}

// exitKind classifies an exit (docs/plugins.md): the guest command that
// ended by itself with status 0, or after a powerdown request, powered
// off; a non-zero status, a signal, a quit (the VMM killed) or a VMM that
// could not run it is a crash.
func exitKind(rec *simvm.ExitRecord) sdk.ExitKind {
	switch {
	case rec.Reason == simvm.ReasonGuest && rec.Code == 0, rec.Reason == simvm.ReasonPowerdown:
		return sdk.ExitPoweroff
	}
	return sdk.ExitCrash
}

func exitDetail(rec *simvm.ExitRecord) string {
	s := fmt.Sprintf("%s (%s)", rec.Status, rec.Reason)
	if rec.Message != "" {
		s += ": " + rec.Message
	}
	return s
}

// Events streams the events of every guest this plugin started or
// recovered until ctx ends; the channel is closed then. Events follow the
// eventer package's drop policy.
func (b *Backend) Events(ctx context.Context) (<-chan sdk.Event, error) {
	return b.events.Stream(ctx)
}

// Close ends every VMM subscription of this process (the VMMs and guests
// keep running) and waits for the forwarders to finish.
func (b *Backend) Close() error {
	b.mu.Lock()
	ws := make([]*watcher, 0, len(b.watchers))
	for _, w := range b.watchers {
		ws = append(ws, w)
	}
	b.mu.Unlock()
	for _, w := range ws {
		w.closed.Store(true)
		w.sub.Close()
		<-w.done
	}
	return nil
}
