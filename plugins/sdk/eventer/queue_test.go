package eventer

import (
	"context"
	"testing"
	"time"
)

func TestQueue(t *testing.T) {
	type push struct {
		v   string
		key string
	}
	tests := []struct {
		name    string
		limit   int
		pushes  []push
		want    []string
		dropped uint64
	}{
		{"fifo", 10, []push{{"a", ""}, {"b", ""}, {"c", ""}}, []string{"a", "b", "c"}, 0},
		{"coalesce same key", 10, []push{{"r1", "ring"}, {"r2", "ring"}, {"x", ""}, {"r3", "ring"}}, []string{"r1", "x"}, 2},
		{"different keys kept", 10, []push{{"r1", "ring/a"}, {"r2", "ring/b"}}, []string{"r1", "r2"}, 0},
		{"unkeyed never coalesced", 10, []push{{"e", ""}, {"e", ""}}, []string{"e", "e"}, 0},
		{"limit drops new", 2, []push{{"a", ""}, {"b", ""}, {"c", ""}}, []string{"a", "b"}, 1},
		{"keyed items not counted", 2, []push{{"a", ""}, {"r1", "ring/a"}, {"r2", "ring/b"}, {"b", ""}, {"c", ""}, {"r3", "ring/c"}}, []string{"a", "r1", "r2", "b", "r3"}, 1},
		{"a popped unkeyed item makes room", 1, []push{{"a", ""}, {"b", ""}}, []string{"a"}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := NewQueue[string]()
			q.limit = tc.limit
			for _, p := range tc.pushes {
				q.Push(p.v, p.key)
			}
			q.Close()
			var got []string
			for {
				v, ok := q.Pop(context.Background())
				if !ok {
					break
				}
				got = append(got, v)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("popped %q, want %q", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("popped %q, want %q", got, tc.want)
				}
			}
			if d := q.Dropped(); d != tc.dropped {
				t.Fatalf("Dropped() = %d, want %d", d, tc.dropped)
			}
		})
	}
}

func TestCoalesceReopensAfterPop(t *testing.T) {
	q := NewQueue[int]()
	q.Push(1, "k")
	if v, _ := q.Pop(context.Background()); v != 1 {
		t.Fatalf("Pop = %d", v)
	}
	q.Push(2, "k")
	if v, _ := q.Pop(context.Background()); v != 2 {
		t.Fatalf("after a pop the key must be accepted again, got %d", v)
	}
}

func TestPopWaitsAndHonoursContext(t *testing.T) {
	q := NewQueue[int]()
	got := make(chan int)
	go func() {
		v, _ := q.Pop(context.Background())
		got <- v
	}()
	q.Push(7, "")
	select {
	case v := <-got:
		if v != 7 {
			t.Fatalf("Pop = %d", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Pop did not wake up")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok := q.Pop(ctx); ok {
		t.Fatal("Pop on a cancelled context returned an item")
	}
}

func TestFloodBounded(t *testing.T) {
	q := NewQueue[int]()
	for i := 0; i < 1_000_000; i++ {
		q.Push(i, "ring")
	}
	if q.Len() != 1 {
		t.Fatalf("Len = %d after a flood of one key", q.Len())
	}
}
