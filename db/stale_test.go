package db_test

import (
	"context"
	"testing"

	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/db/dbtest"
)

// TestReadAfterStaleConnections fills PostgreSQL's reader pool with idle
// connections (all 16 held at once, then released), has the server end
// every one of them, and reads: the read must succeed, however many stale
// connections it meets first (each read that fails drops its own). Tried
// with the whole pool stale, three times in a row. Whether a stale
// connection fails a read or is dropped by database/sql before it depends
// on whether the server's message has reached the socket: here it passed
// with the old single retry too; TestPostgresOutage under CI's -race met
// two stale connections in one read.
func TestReadAfterStaleConnections(t *testing.T) {
	srv := dbtest.NewServer(t)
	ctx := context.Background()
	s, err := db.Open(ctx, srv.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateInstance(ctx, &record.Instance{Name: "pg1", UUID: "00000000-0000-4000-8000-000000000001", Backend: "sim"}); err != nil {
		t.Fatal(err)
	}
	sqlDB, err := db.ReaderPoolForTest(s)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		n := sqlDB.Stats().MaxOpenConnections
		conns := make([]interface{ Close() error }, 0, n)
		for len(conns) < n {
			c, err := sqlDB.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.PingContext(ctx); err != nil {
				c.Close() // a stale one left by the last round: the pool drops it
				continue
			}
			conns = append(conns, c)
		}
		for _, c := range conns {
			c.Close() // back to the pool, idle
		}
		if idle := sqlDB.Stats().Idle; idle < 2 {
			t.Fatalf("round %d: %d idle connections, want the pool's %d", round, idle, n)
		}
		srv.TerminateConnections(t)
		if _, err := s.GetInstance(ctx, "pg1"); err != nil {
			t.Fatalf("round %d: a read after the server ended %d idle connections: %v", round, n, err)
		}
	}
}
