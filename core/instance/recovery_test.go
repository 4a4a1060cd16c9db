package instance

import (
	"context"
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
		m2.RecoverAll(bg)
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
