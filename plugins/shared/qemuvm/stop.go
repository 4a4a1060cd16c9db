package qemuvm

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/shared/qmp"
)

// waitGone waits up to d for the guest's QEMU to end; it reports whether it did.
func waitGone(h *handle, v *vm, d time.Duration) bool {
	v.mu.Lock()
	exited := v.exited
	v.mu.Unlock()
	deadline := time.After(d)
	for {
		if !h.running() {
			if exited != nil {
				select { // let our reaper finish so the PID is free
				case <-exited:
				case <-time.After(time.Second):
				}
			}
			return true
		}
		select {
		case <-exited:
			return true
		case <-deadline:
			return false
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// DefaultStopTimeout is the graceful budget of a Stop without one.
const DefaultStopTimeout = 30 * time.Second

// Stop shuts the guest down: saving its state (Stateful), at once (Force),
// or through the ACPI power button with QMP quit after the budget.
func (b *Backend) Stop(ctx context.Context, hb sdk.Handle, opts sdk.StopOptions) (*sdk.GuestState, error) {
	h, err := b.decode(hb)
	if err != nil {
		return nil, fmt.Errorf("stopping guest: %w", err)
	}
	v := b.vm(h.UUID)
	v.op.Lock()
	defer v.op.Unlock()
	if !h.running() {
		return b.stateOf(h), nil
	}
	c, err := b.ensureQMP(ctx, h, v)
	if err != nil {
		if opts.Stateful {
			return nil, fmt.Errorf("stopping guest %q with its state: %w", h.Name, err)
		}
		b.log.Warn("no QMP connection, killing QEMU", "name", h.Name, "pid", h.PID, "error", err)
		syscall.Kill(h.PID, syscall.SIGKILL)
		waitGone(h, v, 30*time.Second)
		return b.stateOf(h), nil
	}
	switch {
	case opts.Stateful:
		if err := b.saveState(ctx, h, c); err != nil {
			c.Execute(ctx, "cont", nil, nil)
			return nil, fmt.Errorf("stopping guest %q with its state: %w", h.Name, err)
		}
	case !opts.Force:
		budget := opts.Timeout
		if budget <= 0 {
			budget = DefaultStopTimeout
		}
		// Leave time within ctx to quit QEMU when the guest ignores the button.
		if dl, ok := ctx.Deadline(); ok {
			budget = max(min(budget, time.Until(dl)-10*time.Second), 0)
		}
		deadline := time.Now().Add(budget)
		for time.Now().Before(deadline) {
			// Repeat the button press: one sent while the guest was still
			// booting (before acpid ran) is lost.
			if err := c.Execute(ctx, "system_powerdown", nil, nil); err != nil && !errors.Is(err, qmp.ErrClosed) {
				return nil, fmt.Errorf("stopping guest %q: %w", h.Name, err)
			}
			if waitGone(h, v, min(5*time.Second, time.Until(deadline))) {
				return b.stateOf(h), nil
			}
			if ctx.Err() != nil {
				return nil, fmt.Errorf("stopping guest %q: %w", h.Name, ctx.Err())
			}
		}
		b.log.Info("graceful stop timed out, quitting QEMU", "name", h.Name, "budget", budget)
	}
	if err := c.Execute(ctx, "quit", nil, nil); err != nil && !errors.Is(err, qmp.ErrClosed) {
		b.log.Warn("QMP quit failed, killing QEMU", "name", h.Name, "error", err)
		syscall.Kill(h.PID, syscall.SIGKILL)
	}
	if !waitGone(h, v, 15*time.Second) {
		syscall.Kill(h.PID, syscall.SIGKILL)
		if !waitGone(h, v, 15*time.Second) {
			return nil, fmt.Errorf("stopping guest %q: QEMU %d does not exit", h.Name, h.PID)
		}
	}
	return b.stateOf(h), nil
}
