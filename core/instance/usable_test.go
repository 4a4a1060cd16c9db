package instance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// lackingBackend is the fake backend with the plugin host's Usable: while
// lacks is set, Usable refuses with it.
type lackingBackend struct {
	*fakeBackend
	mu    sync.Mutex
	lacks error
}

func (b *lackingBackend) Usable(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lacks
}

func (b *lackingBackend) set(err error) {
	b.mu.Lock()
	b.lacks = err
	b.mu.Unlock()
}

var _ usableBackend = (*lackingBackend)(nil)

type lackingSource struct{ b *lackingBackend }

func (s lackingSource) Backend(name string) (contract.Backend, error) {
	if name != "fake" {
		return nil, fmt.Errorf("backend %q (available: fake): %w", name, errdefs.ErrNotFound)
	}
	return s.b, nil
}

// TestUnusableBackendRefused: on a backend whose Usable fails, Create is
// refused with that error before anything is made (no backend call, no
// row, no event), and Start of an existing instance fails as a start
// that did not happen (the instance stays Stopped, the timeline says
// why). Once the backend is usable again both work.
func TestUnusableBackendRefused(t *testing.T) {
	e := newEnv(t)
	lb := &lackingBackend{fakeBackend: e.be}
	m, err := NewManager(Config{Store: e.store, Backends: lackingSource{lb}, Bus: e.bus,
		Hooks: e.hooks, Files: e.files, DefaultBackend: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
	e.create("old", nil)
	lacks := fmt.Errorf(`backend "fake" cannot run guests: qemu-img not found in PATH (Debian package qemu-utils): %w`, errdefs.ErrUnavailable)
	lb.set(lacks)
	calls := func() []string {
		lb.fakeBackend.mu.Lock()
		defer lb.fakeBackend.mu.Unlock()
		return slices.Clone(lb.fakeBackend.calls)
	}
	callsBefore := len(calls())

	for _, start := range []bool{false, true} {
		_, err = m.Create(bg, CreateRequest{Name: "new", Start: start}, adminCaller)
		if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "qemu-utils") {
			t.Fatalf("Create(start=%v) on an unusable backend = %v, want the backend's unavailable error", start, err)
		}
	}
	if _, err := e.store.GetInstance(bg, "new"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a refused create stored an instance: %v", err)
	}
	if got := e.actions("new"); len(got) != 0 {
		t.Fatalf("a refused create published %v", got)
	}
	if made := calls()[callsBefore:]; len(made) != 0 {
		t.Fatalf("a refused create called the backend: %v", made)
	}

	err = m.Start(bg, "old", adminCaller)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "qemu-utils") {
		t.Fatalf("Start on an unusable backend = %v", err)
	}
	if inst := e.get("old"); inst.Status != status.Stopped.String() {
		t.Fatalf("after a refused start the instance is %s, want Stopped", inst.Status)
	}
	tl, err := m.Timeline(bg, "old", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(tl, func(x TimelineEntry) bool {
		return strings.HasPrefix(x.Detail, "start failed: ") && strings.Contains(x.Detail, "qemu-utils")
	}) {
		t.Fatalf("the timeline does not say why the start failed: %+v", tl)
	}

	lb.set(nil)
	if _, err := m.Create(bg, CreateRequest{Name: "new", Start: true}, adminCaller); err != nil {
		t.Fatalf("Create once usable: %v", err)
	}
	if err := m.Start(bg, "old", adminCaller); err != nil {
		t.Fatalf("Start once usable: %v", err)
	}
}
