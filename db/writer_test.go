package db

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"gorm.io/gorm"
)

// openWriterStore opens a SQLite store in a temporary directory, closed at
// the test's end, for tests that hand its writer batches directly.
func openWriterStore(t *testing.T) *sqlStore {
	t.Helper()
	st, err := Open(context.Background(), filepath.Join(t.TempDir(), "w.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st.(*sqlStore)
}

// TestWriterBatchFallback hands the writer one batch holding good calls, a
// failing call, a panicking call and a cancelled call, and checks that only
// the bad ones fail and that every good one committed.
func TestWriterBatchFallback(t *testing.T) {
	ctx := context.Background()
	s := openWriterStore(t)

	errBoom := errors.New("boom")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	var runs [5]int
	insert := func(i int, body string) func(tx *gorm.DB) error {
		return func(tx *gorm.DB) error {
			runs[i]++
			return tx.Create(&eventRow{Type: "test", Body: []byte(body), Time: now()}).Error
		}
	}
	ops := []*writeOp{
		{ctx: ctx, fn: insert(0, "good-0")},
		{ctx: ctx, fn: func(tx *gorm.DB) error {
			runs[1]++
			if err := tx.Create(&eventRow{Type: "test", Body: []byte("half"), Time: now()}).Error; err != nil {
				return err
			}
			return errBoom // after writing: its write must be rolled back
		}},
		{ctx: ctx, fn: func(*gorm.DB) error { runs[2]++; panic("kaboom") }},
		{ctx: cancelled, fn: insert(3, "cancelled")},
		{ctx: ctx, fn: insert(4, "good-4")},
	}
	for _, op := range ops {
		op.done = make(chan error, 1)
	}
	s.w.commit(ops)

	for i, want := range []error{nil, errBoom, nil, context.Canceled, nil} {
		got := <-ops[i].done
		switch {
		case i == 2:
			if got == nil {
				t.Errorf("op %d (panics) = nil, want an error", i)
			}
		case !errors.Is(got, want) && !(want == nil && got == nil):
			t.Errorf("op %d = %v, want %v", i, got, want)
		}
	}
	// The batch stops at op 1's error; then each op runs alone.
	if want := [5]int{2, 2, 1, 0, 1}; runs != want {
		t.Errorf("ops ran %v times, want %v", runs, want)
	}
	evs, err := s.EventsAfter(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, ev := range evs {
		bodies = append(bodies, string(ev.Body))
	}
	if len(bodies) != 2 || bodies[0] != "good-0" || bodies[1] != "good-4" {
		t.Errorf("stored events %q, want [good-0 good-4]", bodies)
	}
}

// TestWriterBatchCommitsTogether checks that a batch of good calls is one
// transaction: each runs once.
func TestWriterBatchCommitsTogether(t *testing.T) {
	ctx := context.Background()
	s := openWriterStore(t)
	runs := 0
	var ops []*writeOp
	for range 10 {
		ops = append(ops, &writeOp{ctx: ctx, done: make(chan error, 1), fn: func(tx *gorm.DB) error {
			runs++
			return tx.Create(&eventRow{Type: "test", Body: []byte("x"), Time: now()}).Error
		}})
	}
	s.w.commit(ops)
	for i, op := range ops {
		if err := <-op.done; err != nil {
			t.Errorf("op %d: %v", i, err)
		}
	}
	if runs != 10 {
		t.Errorf("ops ran %d times, want 10", runs)
	}
	if last, err := s.LastEventID(ctx); err != nil || last != 10 {
		t.Errorf("LastEventID = %d, %v; want 10", last, err)
	}
}

// TestWriterBatchOutlivesCallerDeadline ends the contexts of calls while
// their batch runs (as a caller's 5 s attempt deadline passes during a
// busy commit) and checks that the batch still commits once, every call
// with it: a started call's context must not abort its batch's
// transaction, or a storm falls back to one transaction per call and the
// store never catches up (the 10,000-guest storm did). A call whose
// context ended before its batch started is still not run.
func TestWriterBatchOutlivesCallerDeadline(t *testing.T) {
	ctx := context.Background()
	s := openWriterStore(t)

	const n = 8
	cancels := make([]context.CancelFunc, n)
	runs := make([]int, n)
	var ops []*writeOp
	for i := range n {
		cctx, cancel := context.WithCancel(ctx)
		cancels[i] = cancel
		ops = append(ops, &writeOp{ctx: cctx, done: make(chan error, 1), fn: func(tx *gorm.DB) error {
			runs[i]++
			if i == 0 {
				// Every caller of the batch gives up now, its own
				// included, while the transaction is under way.
				for _, c := range cancels {
					c()
				}
			}
			return tx.Create(&eventRow{Type: "test", Body: []byte("x"), Time: now()}).Error
		}})
	}
	s.w.commit(ops)
	for i, op := range ops {
		if err := <-op.done; err != nil {
			t.Errorf("op %d: %v (its context ended after the batch started)", i, err)
		}
		if runs[i] != 1 {
			t.Errorf("op %d ran %d times, want once (in the batch, no fallback)", i, runs[i])
		}
	}
	if last, err := s.LastEventID(ctx); err != nil || last != n {
		t.Errorf("LastEventID = %d, %v; want %d", last, err, n)
	}

	// A call whose context ended before its batch: not run.
	gone := &writeOp{ctx: ops[0].ctx, done: make(chan error, 1), fn: func(*gorm.DB) error {
		t.Error("a call whose context had ended ran")
		return nil
	}}
	s.w.commit([]*writeOp{gone})
	if err := <-gone.done; !errors.Is(err, context.Canceled) {
		t.Errorf("ended call = %v, want context.Canceled", err)
	}
}
