package instance

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/errdefs"
)

// TestNameCaseCollision is the attack of two instances whose names differ
// only in case (both would become the guest's local-hostname): names are
// stored lowercase, found by any case, and a second case of a taken name is
// ErrAlreadyExists (409 at the API).
func TestNameCaseCollision(t *testing.T) {
	e := newEnv(t)
	inst, err := e.m.Create(bg, CreateRequest{Name: "Caps1"}, adminCaller)
	if err != nil {
		t.Fatal(err)
	}
	if inst.Name != "caps1" {
		t.Fatalf("created name %q, want it stored lowercase %q", inst.Name, "caps1")
	}
	for _, name := range []string{"caps1", "CAPS1", "Caps1"} {
		t.Run("create "+name, func(t *testing.T) {
			_, err := e.m.Create(bg, CreateRequest{Name: name}, adminCaller)
			if !errors.Is(err, errdefs.ErrAlreadyExists) {
				t.Fatalf("Create(%q): %v, want ErrAlreadyExists", name, err)
			}
		})
		t.Run("get "+name, func(t *testing.T) {
			got, err := e.m.Get(bg, name)
			if err != nil || got.UUID != inst.UUID {
				t.Fatalf("Get(%q) = %v, %v; want caps1", name, got, err)
			}
		})
	}
	if err := e.m.Start(bg, "CAPS1", adminCaller); err != nil {
		t.Fatalf("Start by another case: %v", err)
	}
	if err := e.m.Delete(bg, "Caps1", true, adminCaller); err != nil {
		t.Fatalf("Delete by another case: %v", err)
	}
	if _, err := e.m.Get(bg, "caps1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	if list, _ := e.m.List(bg, ListFilter{}); len(list) != 0 {
		t.Fatalf("%d instances left", len(list))
	}
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStoredUppercaseNames checks instances stored before names were
// case-insensitive: none is renamed, each is found by its exact name, the
// others cases find the lowercase one (or the only one), and the daemon
// says at start what to do about names that differ only in case.
func TestStoredUppercaseNames(t *testing.T) {
	e := newEnv(t)
	for i, name := range []string{"Web1", "web1", "Solo"} {
		rec := &record.Instance{Name: name, UUID: []string{
			"00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002", "00000000-0000-4000-8000-000000000003",
		}[i], Backend: "fake", Config: map[string]string{}, Devices: map[string]map[string]string{}, PowerState: status.PowerStopped}
		if err := e.store.CreateInstance(bg, rec); err != nil {
			t.Fatal(err)
		}
	}
	var logs syncBuffer
	m, err := NewManager(Config{Store: e.store, Backends: fakeBackends{"fake": e.be}, Bus: e.bus, DefaultBackend: "fake",
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ lookup, want string }{
		{"Web1", "Web1"},
		{"web1", "web1"},
		{"WEB1", "web1"},
		{"Solo", "Solo"},
		{"solo", "Solo"},
		{"SOLO", "Solo"},
	}
	for _, tt := range tests {
		got, err := m.Get(bg, tt.lookup)
		if err != nil || got.Name != tt.want {
			t.Errorf("Get(%q) = %v, %v; want %q", tt.lookup, got, err, tt.want)
		}
	}
	if _, err := m.Create(bg, CreateRequest{Name: "solo"}, adminCaller); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("Create(solo) next to Solo: %v, want ErrAlreadyExists", err)
	}
	out := logs.String()
	for _, want := range []string{"differ only in the case", "instance=Web1 other=web1", "delete or recreate one of them", "instance=Solo"} {
		if !strings.Contains(out, want) {
			t.Errorf("start-up log does not say %q:\n%s", want, out)
		}
	}
	// Deleting the lowercase one hands the other cases to the other.
	if err := m.Delete(bg, "web1", true, adminCaller); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Get(bg, "WEB1"); err != nil || got.Name != "Web1" {
		t.Errorf("Get(WEB1) after deleting web1 = %v, %v; want Web1", got, err)
	}
}
