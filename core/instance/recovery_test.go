package instance

import (
	"context"
	"fmt"
	"testing"

	"github.com/guestlink/guestlink/core/status"
)

// TestLoadServesUntilRecovered restarts the manager (as a daemon restart)
// with Load alone: the instances are listed at once, those with a guest
// Unknown with the recovering reason, and their operation lock is held
// for the recovery (so a start, stop or delete waits for it). The recovery
// of web1 is held by the backend's onRecover hook: while it is, web1 is
// still Unknown and locked; once it is released, RecoverAll ends, web1 is
// Running, nothing is left unrecovered and its lock is free.
func TestLoadServesUntilRecovered(t *testing.T) {
	bg := context.Background()
	e := newEnv(t)
	web := e.create("web1", nil)
	e.create("db1", nil)
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}

	m2 := e.manager()
	if err := m2.Load(bg); err != nil {
		t.Fatal(err)
	}
	entry := func(name string) *entry {
		m2.mu.RLock()
		defer m2.mu.RUnlock()
		return m2.byName[name]
	}
	held := map[string]bool{}
	for _, name := range []string{"web1", "db1"} {
		got, err := m2.Get(bg, name)
		if err != nil {
			t.Fatal(err)
		}
		hasGuest := len(entry(name).rec.Handle) > 0
		held[name] = hasGuest
		if !hasGuest {
			continue
		}
		if got.Status != StatusUnknown || got.StatusCode != 0 || got.StatusReason != ReasonRecovering {
			t.Fatalf("%s after Load: %s (%d) %q, want Unknown (0) %q", name, got.Status, got.StatusCode, got.StatusReason, ReasonRecovering)
		}
		if entry(name).op.TryLock() {
			t.Fatalf("%s's operation lock is free after Load: an operation would not wait for its recovery", name)
		}
	}
	if !held["web1"] {
		t.Fatal("web1 has no guest handle after its start")
	}
	want := 0
	for _, h := range held {
		if h {
			want++
		}
	}
	if n := m2.Recovering(); n != want {
		t.Fatalf("Recovering() = %d after Load, want %d", n, want)
	}

	entered, release := make(chan struct{}), make(chan struct{})
	e.be.onRecover = func(uuid string) {
		if uuid == web.UUID {
			close(entered)
			<-release
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		m2.RecoverAll(bg, nil)
	}()
	<-entered
	if got, _ := m2.Get(bg, "web1"); got.Status != StatusUnknown {
		t.Fatalf("web1 during its recovery: %s, want Unknown", got.Status)
	}
	if entry("web1").op.TryLock() {
		t.Fatal("web1's operation lock is free during its recovery")
	}
	close(release)
	<-done

	got, err := m2.Get(bg, "web1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != status.Running.String() || got.StatusReason != "" {
		t.Fatalf("web1 after its recovery: %s %q, want Running", got.Status, got.StatusReason)
	}
	if n := m2.Recovering(); n != 0 {
		t.Fatalf("Recovering() = %d after RecoverAll", n)
	}
	for _, name := range []string{"web1", "db1"} {
		if !entry(name).op.TryLock() {
			t.Fatalf("%s's operation lock is still held after RecoverAll", name)
		}
		entry(name).op.Unlock()
	}
	// An operation goes through again.
	if err := m2.Stop(bg, "web1", StopOptions{}, adminCaller); err != nil {
		t.Fatal(err)
	}
}

// TestRecoverAllNotBehindSlowGuest restarts a manager on guests of two
// backends, the first (in RecoverAll's order) with one guest whose Recover
// does not answer until the test says so (a hung VMM). Every other guest,
// of either backend, must be recovered (Running, its GuestRunning hook
// called, its operation lock free) and RecoverAll's dispatched callback
// called while that one still waits: the recovery shares one pool of
// workers across backends, so neither a slow guest nor a slow backend
// holds the rest back (they once went backend after backend). After the
// release RecoverAll ends with nothing left unrecovered.
func TestRecoverAllNotBehindSlowGuest(t *testing.T) {
	bg := context.Background()
	e := newEnv(t)
	second := newFakeBackend("other")
	m1, err := NewManager(Config{Store: e.store, Backends: fakeBackends{"fake": e.be, "other": second}, Bus: e.bus,
		Hooks: e.hooks, Files: e.files, DefaultBackend: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range 6 {
		for _, b := range []string{"fake", "other"} {
			name := fmt.Sprintf("%s%d", b, i)
			if _, err := m1.Create(bg, CreateRequest{Name: name, Backend: b, Start: true}, adminCaller); err != nil {
				t.Fatalf("creating %s: %v", name, err)
			}
			names = append(names, name)
		}
	}
	slow, err := m1.Get(bg, "fake0")
	if err != nil {
		t.Fatal(err)
	}
	m2, err := NewManager(Config{Store: e.store, Backends: fakeBackends{"fake": e.be, "other": second}, Bus: e.bus,
		Hooks: e.hooks, Files: e.files, DefaultBackend: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Load(bg); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	e.be.onRecover = func(uuid string) {
		if uuid == slow.UUID {
			close(entered)
			<-release
		}
	}
	dispatched := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		m2.RecoverAll(bg, func() { close(dispatched) })
	}()
	<-entered
	<-dispatched
	// The others finish while fake0 waits: each is Running once its
	// lock is free (the worker releases it last).
	for _, name := range names[1:] {
		e := func() *entry {
			m2.mu.RLock()
			defer m2.mu.RUnlock()
			return m2.byName[name]
		}()
		e.op.Lock() // waits for that guest's recovery, never for fake0's
		e.op.Unlock()
		got, err := m2.Get(bg, name)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != status.Running.String() {
			t.Fatalf("%s while fake0's recovery hangs: %s, want Running", name, got.Status)
		}
	}
	if n := m2.Recovering(); n != 1 {
		t.Fatalf("Recovering() = %d while fake0's recovery hangs, want 1", n)
	}
	select {
	case <-done:
		t.Fatal("RecoverAll ended while fake0's Recover had not answered")
	default:
	}
	close(release)
	<-done
	if got, _ := m2.Get(bg, "fake0"); got.Status != status.Running.String() {
		t.Fatalf("fake0 after its recovery: %s, want Running", got.Status)
	}
	if n := m2.Recovering(); n != 0 {
		t.Fatalf("Recovering() = %d after RecoverAll", n)
	}
}
