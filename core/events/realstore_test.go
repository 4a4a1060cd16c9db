package events

import (
	"context"
	"testing"
)

// The real store (db) for the package's tests. db implements EventStore
// and so imports this package: the package's own tests cannot import db
// (an import cycle), so the external test package fills these in
// (store_external_test.go) before any test runs.
var (
	// SQLiteStore opens a store on a new SQLite database, closed when t ends.
	SQLiteStore func(t testing.TB) EventStore
	// OpenStore opens a store on the database at url, closed when t ends.
	OpenStore func(t testing.TB, url string) EventStore
	// PostgresURL is the URL of a new database on the test PostgreSQL server.
	PostgresURL func(t testing.TB) string
	// ListenEvents calls poke on each notification of the event log at url
	// until ctx ends (db.ListenEvents).
	ListenEvents func(ctx context.Context, url string, poke func())
)
