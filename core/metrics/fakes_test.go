package metrics

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/errdefs"
)

// fakeInstances is an InstanceSource over a fixed set of views.
type fakeInstances struct {
	mu    sync.Mutex
	insts []*instance.Instance
	err   error // returned by ListFunc when set
	// gate, when set, holds every Get until it is closed.
	gate chan struct{}
}

func (f *fakeInstances) set(insts ...*instance.Instance) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.insts = insts
}

func (f *fakeInstances) Get(_ context.Context, name string) (*instance.Instance, error) {
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, i := range f.insts {
		if i.Name == name {
			c := *i
			return &c, nil
		}
	}
	return nil, fmt.Errorf("instance %q: %w", name, errdefs.ErrNotFound)
}

func (f *fakeInstances) ListFunc(_ context.Context, _ instance.ListFilter, fn func(*instance.Instance) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	for _, i := range f.insts {
		if err := fn(i); err != nil {
			return err
		}
	}
	return nil
}

// fakePlugins is a PluginSource.
type fakePlugins []Plugin

func (f fakePlugins) Plugins() []Plugin { return f }

// env is a Metrics on a real event bus (SQLite event log) and fakes.
type env struct {
	m     *Metrics
	bus   *events.Bus
	insts *fakeInstances
}

// epoch is the fixed start of the tests' timelines.
var epoch = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func newEnv(t *testing.T, plugins fakePlugins, now time.Time, opts ...events.Option) *env {
	t.Helper()
	return newEnvBuffer(t, plugins, now, 0, opts...)
}

// newEnvBuffer is newEnv with the subscriber's event buffer (0: default).
func newEnvBuffer(t *testing.T, plugins fakePlugins, now time.Time, buffer int, opts ...events.Option) *env {
	t.Helper()
	bus := events.New(dbtest.SQLite(t), opts...)
	t.Cleanup(func() { _ = bus.Close() })
	e := &env{bus: bus, insts: &fakeInstances{}}
	e.m = New(Config{Instances: e.insts, Events: bus, Plugins: plugins, Version: "test",
		Now: func() time.Time { return now }, EventBuffer: buffer})
	return e
}

// publish publishes a lifecycle event of name at epoch+at.
func (e *env) publish(t *testing.T, action, name string, at time.Duration, ctx map[string]any, protocol string) {
	t.Helper()
	ev := events.NewLifecycle(action, name, ctx, &events.Requestor{Protocol: protocol})
	ev.Timestamp = epoch.Add(at)
	if _, err := e.bus.Publish(context.Background(), ev); err != nil {
		t.Fatalf("publishing %s of %s: %v", action, name, err)
	}
}

// running returns the view of a running instance of backend started at
// epoch+at with the given status and agent state.
func running(name, backend string, at time.Duration, st string, code int, agent instance.AgentState) *instance.Instance {
	t := epoch.Add(at)
	return &instance.Instance{Name: name, Backend: backend, Status: st, StatusCode: code, StartedAt: &t,
		Agent: instance.AgentInfo{State: agent}}
}

// eventsFilter is a subscription to every event.
func eventsFilter() events.Filter { return events.Filter{} }

// noEvents is an EventSource for tests that never start the subscriber.
type noEvents struct{}

func (noEvents) Subscribe(events.Filter) (*events.Subscription, error) {
	return nil, errdefs.ErrNotSupported
}
func (noEvents) Stats() events.Stats { return events.Stats{} }
