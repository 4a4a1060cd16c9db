package simbackend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sim/simvm"
)

// Start launches the guest's VMM, subscribes to its events and lets it run
// the guest command.
func (b *Backend) Start(ctx context.Context, raw sdk.Handle, spec *sdk.GuestSpec) (sdk.Handle, *sdk.GuestState, error) {
	h, err := b.guest(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("starting guest: %w", err)
	}
	if spec == nil {
		return nil, nil, fmt.Errorf("starting guest %q: no spec: %w", h.ID, sdk.ErrInvalid)
	}
	if err := validateSpec(spec); err != nil {
		return nil, nil, fmt.Errorf("starting guest %q: %w", h.ID, err)
	}
	if spec.RestoreState {
		return nil, nil, fmt.Errorf("starting guest %q: restoring saved state: %w", h.ID, sdk.ErrNotSupported)
	}
	unlock, err := b.lockGuest(ctx, h)
	if err != nil {
		return nil, nil, fmt.Errorf("starting guest: %w", err)
	}
	defer unlock()
	gc, _ := parseConfig(spec.Config)
	p := h.paths()
	client := simvm.NewClient(p)
	if _, err := liveStatus(ctx, p); err == nil {
		return nil, nil, fmt.Errorf("starting guest %q: already running: %w", h.ID, sdk.ErrConflict)
	} else if !errors.Is(err, simvm.ErrNotRunning) {
		return nil, nil, fmt.Errorf("starting guest %q: %w", h.ID, err)
	}
	if err := waitVMMGone(ctx, p); err != nil {
		return nil, nil, fmt.Errorf("starting guest %q: %w", h.ID, err)
	}
	agent := gc.Agent
	if agent == "" {
		agent = b.opts.Agent
	}
	if gc.Command == DefaultCommand {
		if _, err := os.Stat(agent); err != nil {
			return nil, nil, fmt.Errorf("starting guest %q: the default command runs the agent, but %s is missing (build it or set %s): %w",
				h.ID, agent, KeyAgent, sdk.ErrInvalid)
		}
	}
	name := spec.Name
	if name == "" {
		name = h.Name
	}
	cfg := &simvm.Config{Name: name, UUID: h.UUID, Command: gc.Command, Agent: agent, Layout: gc.Layout, RingSize: gc.RingSize, Link: gc.Link}
	for _, f := range spec.Files {
		cfg.Files = append(cfg.Files, simvm.File{Path: f.Path, Mode: f.Mode, Data: f.Data})
	}
	if err := simvm.WriteConfig(p, cfg); err != nil {
		return nil, nil, fmt.Errorf("starting guest %q: %w", h.ID, err)
	}
	pid, err := simvm.Launch(ctx, b.opts.Executable, p, b.env)
	if err != nil {
		return nil, nil, fmt.Errorf("starting guest %q: %w", h.ID, err)
	}
	h.VMMPID = pid
	if err := b.watch(ctx, h); err != nil {
		_ = client.Execute(context.Background(), simvm.CmdQuit, nil, nil)
		return nil, nil, fmt.Errorf("starting guest %q: subscribing to vmm events: %w", h.ID, err)
	}
	var st simvm.Status
	if err := client.Execute(ctx, simvm.CmdCont, nil, &st); err != nil {
		_ = client.Execute(context.Background(), simvm.CmdQuit, nil, nil)
		return nil, nil, fmt.Errorf("starting guest %q: %w", h.ID, err)
	}
	b.log.Info("guest started", "name", name, "vmm_pid", pid, "guest_pid", st.GuestPID)
	return h.encode(), runningState(p, &st), nil
}

// Stop shuts the guest down: powerdown, then quit once the timeout passed
// (at once with Force). It returns when the VMM has ended. Stopping a
// stopped or deleted guest succeeds.
func (b *Backend) Stop(ctx context.Context, raw sdk.Handle, opts sdk.StopOptions) (*sdk.GuestState, error) {
	h, err := b.guest(raw)
	if errors.Is(err, errGone) {
		return &sdk.GuestState{Status: sdk.StatusStopped}, nil // deleted: nothing runs
	}
	if err != nil {
		return nil, fmt.Errorf("stopping guest: %w", err)
	}
	if opts.Stateful {
		return nil, fmt.Errorf("stopping guest %q statefully: %w", h.ID, sdk.ErrNotSupported)
	}
	unlock, err := b.lockGuest(ctx, h)
	if err != nil {
		return nil, fmt.Errorf("stopping guest: %w", err)
	}
	defer unlock()
	p := h.paths()
	client := simvm.NewClient(p)
	sub, err := client.Subscribe(ctx)
	if errors.Is(err, simvm.ErrNotRunning) {
		return b.stoppedState(h, true)
	}
	if err != nil {
		return nil, fmt.Errorf("stopping guest %q: %w", h.ID, err)
	}
	defer sub.Close()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			if _, err := sub.Next(); err != nil {
				return
			}
		}
	}()
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultStopTimeout
	}
	if !opts.Force {
		err := client.Execute(ctx, simvm.CmdPowerdown, nil, nil)
		var ce *simvm.CommandError
		switch {
		case err == nil:
			t := time.NewTimer(timeout)
			select {
			case <-ended:
				t.Stop()
				if err := waitVMMGone(ctx, p); err != nil {
					return nil, fmt.Errorf("stopping guest %q: %w", h.ID, err)
				}
				return b.stoppedState(h, false)
			case <-ctx.Done():
				t.Stop()
				return nil, fmt.Errorf("stopping guest %q: %w", h.ID, ctx.Err())
			case <-t.C:
				b.log.Info("guest did not power down in time, killing it", "dir", h.Dir, "timeout", timeout)
			}
		case errors.As(err, &ce), errors.Is(err, simvm.ErrNotRunning):
			// Paused or already exiting: quit settles it.
		default:
			return nil, fmt.Errorf("stopping guest %q: %w", h.ID, err)
		}
	}
	if err := client.Execute(ctx, simvm.CmdQuit, nil, nil); err != nil && !errors.Is(err, simvm.ErrNotRunning) {
		return nil, fmt.Errorf("stopping guest %q: %w", h.ID, err)
	}
	t := time.NewTimer(killWait)
	defer t.Stop()
	select {
	case <-ended:
	case <-ctx.Done():
		return nil, fmt.Errorf("stopping guest %q: %w", h.ID, ctx.Err())
	case <-t.C:
		return nil, fmt.Errorf("stopping guest %q: vmm did not end within %v after quit", h.ID, killWait)
	}
	if err := waitVMMGone(ctx, p); err != nil {
		return nil, fmt.Errorf("stopping guest %q: %w", h.ID, err)
	}
	return b.stoppedState(h, false)
}

// Delete removes a stopped guest's directory.
func (b *Backend) Delete(ctx context.Context, raw sdk.Handle) error {
	h, err := b.guest(raw)
	if errors.Is(err, errGone) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting guest: %w", err)
	}
	unlock, err := b.lockGuest(ctx, h)
	if err != nil {
		return fmt.Errorf("deleting guest: %w", err)
	}
	defer unlock()
	if _, err := liveStatus(ctx, h.paths()); err == nil {
		return fmt.Errorf("deleting guest %q: still running: %w", h.ID, sdk.ErrConflict)
	} else if !errors.Is(err, simvm.ErrNotRunning) {
		return fmt.Errorf("deleting guest %q: %w", h.ID, err)
	}
	if err := os.RemoveAll(h.Dir); err != nil {
		return fmt.Errorf("deleting guest %q: %w", h.ID, err)
	}
	b.mu.Lock()
	delete(b.locks, h.Dir)
	b.mu.Unlock()
	b.log.Info("guest deleted", "dir", h.Dir)
	return nil
}
