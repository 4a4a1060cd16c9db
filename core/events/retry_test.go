package events

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// failingStore fails the first fail appends, then stores events in memory.
type failingStore struct {
	mu     sync.Mutex
	fail   int // appends left to fail; -1 = all
	tries  int
	events []*Record
}

func (s *failingStore) AppendEvent(ctx context.Context, ev *Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tries++
	if s.fail != 0 {
		if s.fail > 0 {
			s.fail--
		}
		return errors.New("database is locked (injected)")
	}
	ev.ID = int64(len(s.events) + 1)
	s.events = append(s.events, ev)
	return nil
}

func (s *failingStore) EventsAfter(ctx context.Context, after int64, limit int) ([]*Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Record
	for _, ev := range s.events {
		if ev.ID > after {
			out = append(out, ev)
		}
	}
	return out, nil
}

func (s *failingStore) LastEventID(ctx context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.events)), nil
}

func TestPublishRetriesTheStore(t *testing.T) {
	tests := []struct {
		name      string
		fail      int
		wantErr   string
		wantTries int
	}{
		{"first attempt", 0, "", 1},
		{"transient failure", 3, "", 4},
		{"lost after the retries", -1, "publishing lifecycle event: appending to the event log (", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &failingStore{fail: tt.fail}
			b := New(st, WithWriteRetry(WriteRetry{Initial: time.Millisecond, Max: 2 * time.Millisecond, Elapsed: 50 * time.Millisecond}))
			defer b.Close()
			sub, err := b.Subscribe(Filter{})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			ev, err := b.Publish(context.Background(), NewLifecycle(InstanceStarted, "vm1", nil, nil))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Publish = %v, want %q", err, tt.wantErr)
				}
				if st.tries < 3 {
					t.Fatalf("%d attempts, want retries", st.tries)
				}
				return
			}
			if err != nil || ev.ID != 1 || st.tries != tt.wantTries {
				t.Fatalf("Publish = %+v, %v after %d attempts; want id 1 after %d", ev, err, st.tries, tt.wantTries)
			}
			select {
			case got := <-sub.C():
				if got.ID != 1 {
					t.Fatalf("delivered %+v", got)
				}
			case <-time.After(time.Minute):
				t.Fatal("the retried event was not delivered")
			}
		})
	}
}
