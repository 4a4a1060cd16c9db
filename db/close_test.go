package db

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/guestlink/guestlink/internal/testwait"
)

// backlog is a writer held inside one transaction (the call in flight,
// which waits for release) with n more calls behind it: the queue full and
// the rest waiting to get in, as in a Ready storm of 10,000 guests.
type backlog struct {
	s       *sqlStore
	release chan struct{}
	once    sync.Once
	first   chan error     // the call in flight's result
	results chan error     // the others'
	wg      sync.WaitGroup // every caller
}

func newBacklog(tb testing.TB, s *sqlStore, n int) *backlog {
	tb.Helper()
	ctx := context.Background()
	b := &backlog{s: s, release: make(chan struct{}), first: make(chan error, 1), results: make(chan error, n)}
	insert := func(body string) func(tx *gorm.DB) error {
		return func(tx *gorm.DB) error {
			return tx.Create(&eventRow{Type: "test", Body: []byte(body), Time: now()}).Error
		}
	}
	running := make(chan struct{})
	go func() {
		b.first <- s.w.do(ctx, true, func(tx *gorm.DB) error {
			close(running)
			<-b.release
			return insert("in flight")(tx)
		})
	}()
	<-running
	// A failed test must not leave Close waiting on the transaction.
	tb.Cleanup(b.end)
	var called atomic.Int64
	b.wg.Add(n)
	for i := range n {
		go func() {
			defer b.wg.Done()
			called.Add(1)
			b.results <- s.w.do(ctx, true, insert(fmt.Sprint("queued ", i)))
		}()
	}
	testwait.For(tb, "every call made and the queue full", 30*time.Second, func() bool {
		return called.Load() == int64(n) && len(s.w.ops) == cap(s.w.ops)
	})
	return b
}

// end lets the call in flight finish.
func (b *backlog) end() { b.once.Do(func() { close(b.release) }) }

func (b *backlog) rows(tb testing.TB) int64 {
	tb.Helper()
	var n int64
	if err := b.s.db.Model(&eventRow{}).Count(&n).Error; err != nil {
		tb.Fatal(err)
	}
	return n
}

// TestCloseWritesFailsCallsNotStarted closes the writes of a store whose
// writer is inside a transaction with 2,000 calls behind it (its queue of
// 256 full, the rest waiting to be queued). The transaction in flight must
// commit; every call behind it must fail with ErrClosed, none committed
// (before, close committed the whole backlog batch after batch, and first
// waited for every blocked caller to get its call queued). Reads go on
// until Close, and a write after CloseWrites fails at once.
func TestCloseWritesFailsCallsNotStarted(t *testing.T) {
	const n = 2000
	s := openWriterStore(t)
	b := newBacklog(t, s, n)
	closed := make(chan struct{})
	go func() {
		s.CloseWrites()
		close(closed)
	}()
	// The callers waiting to be queued leave at once: closing must not
	// wait for the transaction in flight to take them.
	testwait.For(t, "the calls behind the transaction failed", 30*time.Second, func() bool {
		return len(b.results) == n-cap(s.w.ops)
	})
	select {
	case <-closed:
		t.Fatal("CloseWrites returned before the transaction in flight ended")
	default:
	}
	b.end()
	<-closed
	if err := <-b.first; err != nil {
		t.Fatalf("the call in flight: %v, want it committed", err)
	}
	b.wg.Wait()
	close(b.results)
	failed := 0
	for err := range b.results {
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("a call behind the transaction: %v, want ErrClosed", err)
		}
		failed++
	}
	if failed != n {
		t.Fatalf("%d calls failed, want %d", failed, n)
	}
	if got := b.rows(t); got != 1 {
		t.Fatalf("%d rows after CloseWrites, want 1 (the call in flight's)", got)
	}
	if err := s.w.do(context.Background(), false, func(*gorm.DB) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("a write after CloseWrites: %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkCloseWithBacklog measures a store's Close with a storm's
// backlog of 10,000 write calls behind the transaction in flight (the
// stop's "store" step, or what its callers wait for in the steps before
// it): close-ms from Close to its return, the transaction in flight ended
// as Close began.
func BenchmarkCloseWithBacklog(b *testing.B) {
	const n = 10000
	for b.Loop() {
		b.StopTimer()
		st, err := Open(context.Background(), b.TempDir()+"/w.db")
		if err != nil {
			b.Fatal(err)
		}
		s := st.(*sqlStore)
		bl := newBacklog(b, s, n)
		b.StartTimer()
		t0 := time.Now()
		go bl.end()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		took := time.Since(t0)
		b.StopTimer()
		bl.wg.Wait()
		close(bl.results)
		committed := 0
		for err := range bl.results {
			if err == nil {
				committed++
			}
		}
		b.ReportMetric(float64(took.Milliseconds()), "close-ms")
		b.ReportMetric(float64(committed), "backlog-committed")
		b.StartTimer()
	}
}
