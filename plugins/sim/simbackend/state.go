package simbackend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sim/simvm"
)

// State reports the guest's state.
func (b *Backend) State(ctx context.Context, raw sdk.Handle) (*sdk.GuestState, error) {
	h, err := b.guest(raw)
	if err != nil {
		return nil, fmt.Errorf("reading guest state: %w", err)
	}
	return b.state(ctx, h)
}

func (b *Backend) state(ctx context.Context, h *handle) (*sdk.GuestState, error) {
	p := h.paths()
	st, err := liveStatus(ctx, p)
	if err == nil {
		return runningState(p, st), nil
	}
	if !errors.Is(err, simvm.ErrNotRunning) {
		return nil, fmt.Errorf("reading state of guest %q: %w", h.ID, err)
	}
	return b.stoppedState(h, false)
}

// shutdownWait bounds the wait for a VMM that is already shutting down.
const shutdownWait = 15 * time.Second

// liveStatus returns the status of p's VMM. A VMM whose guest has ended but
// which is still delivering its last events counts as gone: liveStatus
// waits for it to finish and returns simvm.ErrNotRunning.
func liveStatus(ctx context.Context, p simvm.Paths) (*simvm.Status, error) {
	c := simvm.NewClient(p)
	deadline := time.Now().Add(shutdownWait)
	for {
		st, err := c.Status(ctx)
		if err != nil || st.State != simvm.StateShutdown {
			return st, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("vmm %d still shutting down after %v", st.VMMPID, shutdownWait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitVMMGone waits, at most killWait, for an exiting VMM's process to end.
func waitVMMGone(ctx context.Context, p simvm.Paths) error {
	ctx, cancel := context.WithTimeout(ctx, killWait)
	defer cancel()
	return simvm.WaitUnlocked(ctx, p)
}

// runningState describes a running VMM.
func runningState(p simvm.Paths, st *simvm.Status) *sdk.GuestState {
	d := baseDetails(p)
	d[DetailLayout] = string(st.Layout)
	d[DetailGuestPID] = strconv.Itoa(st.GuestPID)
	d[DetailBoot] = strconv.Itoa(st.Boot)
	d[DetailRingSize] = strconv.Itoa(st.RingSize)
	return &sdk.GuestState{Status: sdk.StatusRunning, PID: int64(st.VMMPID), Details: d}
}

func baseDetails(p simvm.Paths) map[string]string {
	return map[string]string{
		DetailDevlxdSocket: p.DevlxdSocket(),
		DetailConsoleLog:   p.Console(),
		DetailGuestDir:     p.Dir,
	}
}

// stoppedState describes a guest whose VMM does not answer: stopped with its
// exit record, stopped if it never ran, or an error when a VMM ran and ended
// without recording an exit (it was killed). With settle, an error state is
// settled into a stopped one by writing the missing record (Stop of a
// crashed guest).
func (b *Backend) stoppedState(h *handle, settle bool) (*sdk.GuestState, error) {
	p := h.paths()
	d := baseDetails(p)
	cfg, cfgErr := simvm.ReadConfig(p)
	if cfgErr == nil {
		d[DetailLayout] = string(cfg.Layout)
	}
	rec, err := simvm.ReadExitRecord(p)
	switch {
	case err == nil:
		d[DetailExitStatus] = rec.Status
		st := &sdk.GuestState{Status: sdk.StatusStopped, Details: d}
		if rec.Reason == simvm.ReasonError {
			st.Message = rec.Message
		}
		return st, nil
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("reading state of guest %q: %w", h.ID, err)
	case errors.Is(cfgErr, os.ErrNotExist):
		return &sdk.GuestState{Status: sdk.StatusStopped, Details: d}, nil // never started
	}
	msg := fmt.Sprintf("vmm (pid %d) ended without recording how the guest ended; see %s", h.VMMPID, p.VMMLog())
	if settle {
		if n := simvm.KillStrays(p); n > 0 {
			b.log.Info("killed processes left over by a lost vmm", "dir", h.Dir, "count", n)
		}
		rec := &simvm.ExitRecord{Reason: simvm.ReasonError, Status: "vmm lost", Code: -1, Message: msg, VMMPID: h.VMMPID, ExitedAt: time.Now()}
		if err := simvm.WriteExitRecord(p, rec); err != nil {
			return nil, fmt.Errorf("stopping guest %q: %w", h.ID, err)
		}
		d[DetailExitStatus] = rec.Status
		return &sdk.GuestState{Status: sdk.StatusStopped, Message: msg, Details: d}, nil
	}
	return &sdk.GuestState{Status: sdk.StatusError, Message: msg, Details: d}, nil
}

// Recover re-attaches to the guest's VMM, if it runs, and reports its state.
func (b *Backend) Recover(ctx context.Context, raw sdk.Handle, spec *sdk.GuestSpec) (sdk.Handle, *sdk.GuestState, error) {
	h, err := b.guest(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("recovering guest: %w", err)
	}
	st, err := b.state(ctx, h)
	if err != nil {
		return nil, nil, fmt.Errorf("recovering guest %q: %w", h.ID, err)
	}
	if st.Status == sdk.StatusRunning {
		h.VMMPID = int(st.PID)
		if err := b.watch(ctx, h); err != nil && !errors.Is(err, simvm.ErrNotRunning) {
			return nil, nil, fmt.Errorf("recovering guest %q: subscribing to vmm events: %w", h.ID, err)
		}
		b.log.Info("guest recovered", "dir", h.Dir, "vmm_pid", h.VMMPID)
	}
	return h.encode(), st, nil
}
