// Package dbtest gives tests a fresh db.Store on either engine: SQLite in a
// temporary directory, or a fresh database in a private PostgreSQL cluster
// that the test binary starts once and stops when it exits.
//
// Packages that call Postgres or PostgresURL should run their tests through
// Main (or call Stop at the end of their own TestMain):
//
//	func TestMain(m *testing.M) { dbtest.Main(m) }
//
// Without it the cluster still dies with the test binary (it is started with
// a parent-death signal), and its directory is removed by the next run.
package dbtest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/guestlink/guestlink/db"
)

// openTimeout bounds opening (and migrating) a store in a test.
const openTimeout = 2 * time.Minute

// SQLiteURL returns the URL of a new SQLite database file in a temporary
// directory removed when the test ends.
func SQLiteURL(t testing.TB) string {
	t.Helper()
	return db.DefaultURL(t.TempDir())
}

// SQLite opens a Store on a new SQLite database in a temporary directory
// and closes it when the test ends.
func SQLite(t testing.TB, opts ...db.Option) db.Store {
	t.Helper()
	return Open(t, SQLiteURL(t), opts...)
}

// Postgres opens a Store on a new database of the test binary's PostgreSQL
// cluster (started on first use) and closes it when the test ends. It skips
// the test if PostgreSQL's server binaries are not installed.
func Postgres(t testing.TB, opts ...db.Option) db.Store {
	t.Helper()
	return Open(t, PostgresURL(t), opts...)
}

// Open opens a Store on url and closes it when the test ends.
func Open(t testing.TB, url string, opts ...db.Option) db.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	s, err := db.Open(ctx, url, opts...)
	if err != nil {
		t.Fatalf("opening test database: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("closing test database: %v", err)
		}
	})
	return s
}

// Engine is one database engine a test suite runs against.
type Engine struct {
	Name string                    // "sqlite" or "postgres", for t.Run
	URL  func(t testing.TB) string // a fresh, empty database's URL
}

// Engines lists both engines, for suites that run the same test against
// each: for _, e := range dbtest.Engines() { t.Run(e.Name, ...) }.
func Engines() []Engine {
	return []Engine{
		{Name: db.EngineSQLite, URL: SQLiteURL},
		{Name: db.EnginePostgres, URL: PostgresURL},
	}
}

// Main runs the tests of m, stops the PostgreSQL cluster if one was started
// and exits with the tests' status. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// removeAllBestEffort removes dir, ignoring errors (used for leftovers).
func removeAllBestEffort(dir string) {
	_ = os.RemoveAll(filepath.Clean(dir))
}
