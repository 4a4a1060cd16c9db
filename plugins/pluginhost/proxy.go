package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// hostError is an error of a backend call as the daemon sees it: its text
// names the backend and it matches the original error's kinds and the
// matching errdefs kind.
type hostError struct {
	msg  string
	errs []error
}

func (e *hostError) Error() string   { return e.msg }
func (e *hostError) Unwrap() []error { return e.errs }

// unavailable marks err as both errdefs.ErrUnavailable and
// sdk.ErrUnavailable.
func unavailable(err error) error {
	return &hostError{msg: err.Error(), errs: []error{err, errdefs.ErrUnavailable, sdk.ErrUnavailable}}
}

// kinds maps the SDK's error kinds to the daemon's.
var kinds = [...]struct{ sdk, core error }{
	{sdk.ErrNotFound, errdefs.ErrNotFound},
	{sdk.ErrInvalid, errdefs.ErrInvalid},
	{sdk.ErrConflict, errdefs.ErrConflict},
	{sdk.ErrNotSupported, errdefs.ErrNotSupported},
	{sdk.ErrUnavailable, errdefs.ErrUnavailable},
}

// proxy is the stable Backend of one plugin: every call goes to the current
// plugin process with a deadline, and its errors get daemon kinds.
type proxy struct {
	m *managed
}

var _ sdk.Backend = (*proxy)(nil)

// budget says how long a call may take.
type budget int

const (
	short budget = iota // CallTimeout
	long                // the caller's deadline, else LongCallTimeout
)

// call runs f against the current plugin process within the call's budget
// (at least floor when the caller set no deadline) and translates its
// error.
func (p *proxy) call(ctx context.Context, op string, b budget, floor time.Duration, f func(context.Context, sdk.Backend) error) error {
	m := p.m
	c := m.current()
	if c == nil {
		// The daemon serves before its plugins' first start: a call made
		// meanwhile waits for it instead of failing.
		select {
		case <-m.firstDone:
		case <-ctx.Done():
		}
		c = m.current()
	}
	if c == nil {
		st := m.status()
		msg := fmt.Sprintf("backend %q: %s: plugin is %s", m.name, op, st.Health)
		if st.LastError != "" {
			msg += " (last error: " + st.LastError + ")"
		}
		return unavailable(errors.New(msg))
	}
	cfg := &m.h.cfg
	timeout := cfg.CallTimeout
	if b == long {
		timeout = max(cfg.LongCallTimeout, floor)
	}
	var cctx context.Context
	var cancel context.CancelFunc
	if _, ok := ctx.Deadline(); ok && b == long {
		cctx, cancel = context.WithCancel(ctx) // the caller's budget
	} else {
		cctx, cancel = context.WithTimeout(ctx, timeout)
	}
	err := f(cctx, c.Backend())
	cancel()
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		// Our deadline, not the caller's: the plugin hangs. Check its
		// health now.
		m.poke()
		return &hostError{
			msg:  fmt.Sprintf("backend %q: %s: plugin did not answer within %v: %v", m.name, op, timeout, err),
			errs: []error{err, errdefs.ErrUnavailable, sdk.ErrUnavailable},
		}
	case errors.Is(err, sdk.ErrUnavailable):
		m.poke()
	}
	e := &hostError{msg: fmt.Sprintf("backend %q: %v", m.name, err), errs: []error{err}}
	for _, k := range kinds {
		if errors.Is(err, k.sdk) {
			e.errs = append(e.errs, k.core)
			break
		}
	}
	return e
}

// Info asks the current plugin process for its Info, which also updates
// the plugin's health (what it reports missing).
func (p *proxy) Info(ctx context.Context) (info *sdk.Info, err error) {
	c := p.m.current()
	err = p.call(ctx, "reading info", short, 0, func(ctx context.Context, b sdk.Backend) error {
		info, err = b.Info(ctx)
		return err
	})
	if err == nil {
		p.m.setInfo(c, info)
	}
	return info, err
}

// Usable returns nil unless the plugin runs and reports that the host
// lacks something it needs; then it is an errdefs.ErrUnavailable error
// naming what is missing and the Debian package that provides it. The
// daemon calls it before it creates or starts a guest, so that nothing is
// made on a backend that cannot run it. A healthy plugin costs no call; an
// unhealthy one is asked again (the host may have been fixed since the last
// health ping). A plugin that is down is left to the call that follows,
// which fails with its own error.
func (p *proxy) Usable(ctx context.Context) error {
	if p.m.status().Health != HealthUnhealthy {
		return nil
	}
	info, err := p.Info(ctx)
	if err != nil {
		return err
	}
	if len(info.Missing) == 0 {
		return nil
	}
	return unavailable(fmt.Errorf("backend %q cannot run guests: %s", p.m.name, sdk.MissingText(info.Missing)))
}

func (p *proxy) Create(ctx context.Context, spec *sdk.GuestSpec) (h sdk.Handle, err error) {
	err = p.call(ctx, "creating guest", short, 0, func(ctx context.Context, b sdk.Backend) error {
		h, err = b.Create(ctx, spec)
		return err
	})
	return h, err
}

func (p *proxy) Start(ctx context.Context, h sdk.Handle, spec *sdk.GuestSpec) (nh sdk.Handle, st *sdk.GuestState, err error) {
	err = p.call(ctx, "starting guest", long, 0, func(ctx context.Context, b sdk.Backend) error {
		nh, st, err = b.Start(ctx, h, spec)
		return err
	})
	return nh, st, err
}

func (p *proxy) Stop(ctx context.Context, h sdk.Handle, opts sdk.StopOptions) (st *sdk.GuestState, err error) {
	floor := opts.Timeout + p.m.h.cfg.CallTimeout
	err = p.call(ctx, "stopping guest", long, floor, func(ctx context.Context, b sdk.Backend) error {
		st, err = b.Stop(ctx, h, opts)
		return err
	})
	return st, err
}

func (p *proxy) Delete(ctx context.Context, h sdk.Handle) error {
	return p.call(ctx, "deleting guest", short, 0, func(ctx context.Context, b sdk.Backend) error {
		return b.Delete(ctx, h)
	})
}

func (p *proxy) State(ctx context.Context, h sdk.Handle) (st *sdk.GuestState, err error) {
	err = p.call(ctx, "reading guest state", short, 0, func(ctx context.Context, b sdk.Backend) error {
		st, err = b.State(ctx, h)
		return err
	})
	return st, err
}

// Events returns the plugin's events across restarts until ctx or the
// host ends; they are the events OnEvent receives too. A subscriber that
// does not keep up loses events (logged).
func (p *proxy) Events(ctx context.Context) (<-chan sdk.Event, error) {
	if p.m.h.ctx.Err() != nil {
		return nil, unavailable(fmt.Errorf("backend %q: opening event stream: plugin host closed", p.m.name))
	}
	return p.m.subscribe(ctx), nil
}

func (p *proxy) ReadRing(ctx context.Context, h sdk.Handle, limit int) (data []byte, err error) {
	err = p.call(ctx, "reading ring buffer", short, 0, func(ctx context.Context, b sdk.Backend) error {
		data, err = b.ReadRing(ctx, h, limit)
		return err
	})
	return data, err
}

// ReadRings reads a batch of rings in one call to the plugin
// (sdk.RingBatchReader; a plugin without it is read one ring per call).
// Each read's error names the backend.
func (p *proxy) ReadRings(ctx context.Context, reads []sdk.RingRead) (res []sdk.RingData, err error) {
	err = p.call(ctx, "reading ring buffers", short, 0, func(ctx context.Context, b sdk.Backend) error {
		res = sdk.ReadRings(ctx, b, reads)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i := range res {
		if res[i].Err != nil {
			res[i].Err = fmt.Errorf("backend %q: %w", p.m.name, res[i].Err)
		}
	}
	return res, nil
}

var _ sdk.RingBatchReader = (*proxy)(nil)

// UpdateDevices asks the plugin to hot-plug devices of a running guest
// (sdk.DeviceHotplugger); a plugin without the capability answers
// sdk.ErrNotSupported.
func (p *proxy) UpdateDevices(ctx context.Context, h sdk.Handle, add map[string]sdk.Device, remove []string) error {
	return p.call(ctx, "updating devices", short, 0, func(ctx context.Context, b sdk.Backend) error {
		hp, ok := b.(sdk.DeviceHotplugger)
		if !ok {
			return fmt.Errorf("backend %q cannot hot-plug devices: %w", p.m.name, sdk.ErrNotSupported)
		}
		return hp.UpdateDevices(ctx, h, add, remove)
	})
}

var _ sdk.DeviceHotplugger = (*proxy)(nil)

// LinkEndpoint asks the plugin for the guest's link and applies the link
// rule the conformance kit applies too (sdk.CheckLinkEndpoint): an endpoint
// of a kind the plugin did not announce in Info, or malformed, is
// errdefs.ErrInvalid, and the guest runs without a link. A plugin that
// announced no link kind answers sdk.ErrNotSupported (errdefs kind too).
func (p *proxy) LinkEndpoint(ctx context.Context, h sdk.Handle) (ep *sdk.LinkEndpoint, err error) {
	err = p.call(ctx, "reading link endpoint", short, 0, func(ctx context.Context, b sdk.Backend) error {
		ep, err = b.LinkEndpoint(ctx, h)
		return err
	})
	if err != nil {
		return nil, err
	}
	p.m.mu.Lock()
	info := p.m.info
	p.m.mu.Unlock()
	if err := sdk.CheckLinkEndpoint(info, ep); err != nil {
		return nil, &hostError{msg: fmt.Sprintf("backend %q: %v", p.m.name, err), errs: []error{err, errdefs.ErrInvalid}}
	}
	return ep, nil
}

func (p *proxy) Recover(ctx context.Context, h sdk.Handle, spec *sdk.GuestSpec) (nh sdk.Handle, st *sdk.GuestState, err error) {
	err = p.call(ctx, "recovering guest", long, 0, func(ctx context.Context, b sdk.Backend) error {
		nh, st, err = b.Recover(ctx, h, spec)
		return err
	})
	return nh, st, err
}
