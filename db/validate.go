package db

import (
	"fmt"
	"unicode/utf8"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
)

// column is one string column's value and the most characters it may hold
// (0: unlimited), as declared in the schema.
type column struct {
	name  string
	value string
	max   int
}

// checkColumns rejects values both engines would not store alike:
// PostgreSQL refuses over-long values, NUL bytes and invalid UTF-8, which
// SQLite would keep silently.
func checkColumns(cols ...column) error {
	for _, c := range cols {
		if !utf8.ValidString(c.value) {
			return fmt.Errorf("%s is not valid UTF-8: %w", c.name, ErrInvalid)
		}
		for i := 0; i < len(c.value); i++ {
			if c.value[i] == 0 {
				return fmt.Errorf("%s contains a NUL byte: %w", c.name, ErrInvalid)
			}
		}
		if n := utf8.RuneCountInString(c.value); c.max > 0 && n > c.max {
			return fmt.Errorf("%s is %d characters long, at most %d allowed: %w", c.name, n, c.max, ErrInvalid)
		}
	}
	return nil
}

func checkInstance(in *record.Instance) error {
	return checkColumns(
		column{"name", in.Name, 63},
		column{"uuid", in.UUID, 36},
		column{"backend", in.Backend, 64},
		column{"power state", in.PowerState, 16},
	)
}

func checkEntry(e *record.TimelineEntry) error {
	return checkColumns(
		column{"kind", e.Kind, 16},
		column{"from", e.From, 32},
		column{"to", e.To, 32},
		column{"cause", e.Cause, 64},
		column{"detail", e.Detail, 0},
	)
}

func checkEvent(ev *events.Record) error {
	return checkColumns(
		column{"type", ev.Type, 32},
		column{"instance", ev.Instance, 63},
	)
}
