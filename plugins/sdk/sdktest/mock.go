// Package sdktest helps test code on either side of the plugin contract: a
// mock Backend with function fields (after Nomad's drivers.MockDriver) and
// an in-process harness that serves a Backend over go-plugin's gRPC
// transport without starting a process.
package sdktest

import (
	"context"
	"fmt"
	"sync"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// Backend is a mock sdk.Backend. Each method calls its function field when
// it is set; otherwise it falls back to a small in-memory backend: Create
// stores a stopped guest whose handle is its UUID, Start and Stop flip its
// status, Delete forgets it, State and Recover report it, Events streams
// what Emit sends, ReadRing returns nothing and LinkEndpoint a hybrid
// socket path that does not exist. Unknown handles fail with
// sdk.ErrNotFound. A Backend is safe for concurrent use; the zero value is
// ready to use and calls itself "mock".
type Backend struct {
	InfoFunc         func(ctx context.Context) (*sdk.Info, error)
	CreateFunc       func(ctx context.Context, spec *sdk.GuestSpec) (sdk.Handle, error)
	StartFunc        func(ctx context.Context, h sdk.Handle, spec *sdk.GuestSpec) (sdk.Handle, *sdk.GuestState, error)
	StopFunc         func(ctx context.Context, h sdk.Handle, opts sdk.StopOptions) (*sdk.GuestState, error)
	DeleteFunc       func(ctx context.Context, h sdk.Handle) error
	StateFunc        func(ctx context.Context, h sdk.Handle) (*sdk.GuestState, error)
	EventsFunc       func(ctx context.Context) (<-chan sdk.Event, error)
	ReadRingFunc     func(ctx context.Context, h sdk.Handle, max int) ([]byte, error)
	LinkEndpointFunc func(ctx context.Context, h sdk.Handle) (*sdk.LinkEndpoint, error)
	RecoverFunc      func(ctx context.Context, h sdk.Handle, spec *sdk.GuestSpec) (sdk.Handle, *sdk.GuestState, error)

	mu      sync.Mutex
	guests  map[string]sdk.Status // by handle
	streams map[*stream]struct{}
}

var _ sdk.Backend = (*Backend)(nil)

// Info implements sdk.Backend.
func (b *Backend) Info(ctx context.Context) (*sdk.Info, error) {
	if b.InfoFunc != nil {
		return b.InfoFunc(ctx)
	}
	return &sdk.Info{Name: "mock", Version: "0.0.0", ConfigPrefixes: []string{"mock."}}, nil
}

// Create implements sdk.Backend.
func (b *Backend) Create(ctx context.Context, spec *sdk.GuestSpec) (sdk.Handle, error) {
	if b.CreateFunc != nil {
		return b.CreateFunc(ctx, spec)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.guests == nil {
		b.guests = map[string]sdk.Status{}
	}
	b.guests[spec.UUID] = sdk.StatusStopped
	return sdk.Handle(spec.UUID), nil
}

// set changes the status of a known guest.
func (b *Backend) set(h sdk.Handle, st sdk.Status) (*sdk.GuestState, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.guests[string(h)]; !ok {
		return nil, fmt.Errorf("mock guest %q: %w", h, sdk.ErrNotFound)
	}
	b.guests[string(h)] = st
	return &sdk.GuestState{Status: st, PID: 1}, nil
}

// Start implements sdk.Backend.
func (b *Backend) Start(ctx context.Context, h sdk.Handle, spec *sdk.GuestSpec) (sdk.Handle, *sdk.GuestState, error) {
	if b.StartFunc != nil {
		return b.StartFunc(ctx, h, spec)
	}
	st, err := b.set(h, sdk.StatusRunning)
	if err != nil {
		return nil, nil, fmt.Errorf("starting guest: %w", err)
	}
	return h, st, nil
}

// Stop implements sdk.Backend.
func (b *Backend) Stop(ctx context.Context, h sdk.Handle, opts sdk.StopOptions) (*sdk.GuestState, error) {
	if b.StopFunc != nil {
		return b.StopFunc(ctx, h, opts)
	}
	st, err := b.set(h, sdk.StatusStopped)
	if err != nil {
		return nil, fmt.Errorf("stopping guest: %w", err)
	}
	return st, nil
}

// Delete implements sdk.Backend.
func (b *Backend) Delete(ctx context.Context, h sdk.Handle) error {
	if b.DeleteFunc != nil {
		return b.DeleteFunc(ctx, h)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.guests, string(h))
	return nil
}

// State implements sdk.Backend.
func (b *Backend) State(ctx context.Context, h sdk.Handle) (*sdk.GuestState, error) {
	if b.StateFunc != nil {
		return b.StateFunc(ctx, h)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	st, ok := b.guests[string(h)]
	if !ok {
		return nil, fmt.Errorf("reading state of mock guest %q: %w", h, sdk.ErrNotFound)
	}
	return &sdk.GuestState{Status: st}, nil
}

// Events implements sdk.Backend.
func (b *Backend) Events(ctx context.Context) (<-chan sdk.Event, error) {
	if b.EventsFunc != nil {
		return b.EventsFunc(ctx)
	}
	s := &stream{in: make(chan sdk.Event), done: ctx.Done()}
	b.mu.Lock()
	if b.streams == nil {
		b.streams = map[*stream]struct{}{}
	}
	b.streams[s] = struct{}{}
	b.mu.Unlock()
	out := make(chan sdk.Event)
	go func() {
		defer close(out)
		defer func() {
			b.mu.Lock()
			delete(b.streams, s)
			b.mu.Unlock()
		}()
		for {
			select {
			case ev := <-s.in:
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// stream is one Events stream of the default Events.
type stream struct {
	in   chan sdk.Event // never closed
	done <-chan struct{}
}

// Emit sends ev to every stream opened by the default Events, waiting for
// each to take it, and returns how many took it. A stream whose context
// ends while Emit waits is skipped; Emit gives up when ctx ends.
func (b *Backend) Emit(ctx context.Context, ev sdk.Event) int {
	b.mu.Lock()
	ss := make([]*stream, 0, len(b.streams))
	for s := range b.streams {
		ss = append(ss, s)
	}
	b.mu.Unlock()
	n := 0
	for _, s := range ss {
		select {
		case s.in <- ev:
			n++
		case <-s.done:
		case <-ctx.Done():
			return n
		}
	}
	return n
}

// ReadRing implements sdk.Backend.
func (b *Backend) ReadRing(ctx context.Context, h sdk.Handle, max int) ([]byte, error) {
	if b.ReadRingFunc != nil {
		return b.ReadRingFunc(ctx, h, max)
	}
	return nil, nil
}

// LinkEndpoint implements sdk.Backend.
func (b *Backend) LinkEndpoint(ctx context.Context, h sdk.Handle) (*sdk.LinkEndpoint, error) {
	if b.LinkEndpointFunc != nil {
		return b.LinkEndpointFunc(ctx, h)
	}
	return &sdk.LinkEndpoint{Kind: sdk.LinkHybrid, Path: "/nonexistent/" + string(h)}, nil
}

// Recover implements sdk.Backend.
func (b *Backend) Recover(ctx context.Context, h sdk.Handle, spec *sdk.GuestSpec) (sdk.Handle, *sdk.GuestState, error) {
	if b.RecoverFunc != nil {
		return b.RecoverFunc(ctx, h, spec)
	}
	st, err := b.State(ctx, h)
	if err != nil {
		return nil, nil, fmt.Errorf("recovering guest: %w", err)
	}
	return h, st, nil
}
