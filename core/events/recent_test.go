package events

import (
	"context"
	"fmt"
	"testing"
)

func TestRecent(t *testing.T) {
	ctx := context.Background()
	bus := New(SQLiteStore(t))
	t.Cleanup(func() { bus.Close() })
	for i := range 30 {
		typ := TypeLifecycle
		if i%3 == 0 {
			typ = TypeLogging
		}
		if _, err := bus.Publish(ctx, Event{Type: typ, Instance: fmt.Sprintf("i%d", i), Metadata: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		typ   string
		n     int
		want  int
		first string // instance of the oldest returned event
	}{
		{"lifecycle newest five", TypeLifecycle, 5, 5, "i23"},
		{"any type newest three", "", 3, 3, "i27"},
		{"more than stored", TypeLogging, 50, 10, "i0"},
		{"none asked", TypeLifecycle, 0, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := bus.Recent(ctx, tt.typ, tt.n)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tt.want {
				t.Fatalf("got %d events, want %d", len(got), tt.want)
			}
			for i := 1; i < len(got); i++ {
				if got[i].ID <= got[i-1].ID {
					t.Fatalf("not oldest first: %d then %d", got[i-1].ID, got[i].ID)
				}
			}
			if len(got) > 0 && got[0].Instance != tt.first {
				t.Errorf("oldest is %q, want %q", got[0].Instance, tt.first)
			}
			for _, ev := range got {
				if tt.typ != "" && ev.Type != tt.typ {
					t.Errorf("event %d has type %q", ev.ID, ev.Type)
				}
			}
		})
	}
}
