package events_test

import (
	"context"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/db/dbtest"
)

// init wires the real store into the package's tests (realstore_test.go).
func init() {
	events.SQLiteStore = func(t testing.TB) events.EventStore { return dbtest.SQLite(t) }
	events.OpenStore = func(t testing.TB, url string) events.EventStore { return dbtest.Open(t, url) }
	events.PostgresURL = dbtest.PostgresURL
	events.ListenEvents = func(ctx context.Context, url string, poke func()) { db.ListenEvents(ctx, url, poke, nil) }
}

// TestMain checks for leaked goroutines and stops the test PostgreSQL
// server TestTailAcrossMembers starts (its waiting goroutine lives until
// then).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/guestlink/guestlink/db/dbtest.(*cluster).run.func1"), goleak.Cleanup(func(code int) {
		dbtest.Stop()
		os.Exit(code)
	}))
}
