package db_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/glebarez/sqlite"
	"go.uber.org/goleak"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/db/dbtest"
)

func TestDefaultURL(t *testing.T) {
	if got, want := db.DefaultURL("/var/lib/guestlink"), "sqlite:///var/lib/guestlink/guestlink.db"; got != want {
		t.Errorf("DefaultURL = %q, want %q", got, want)
	}
}

func TestOpenURLForms(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	t.Chdir(dir)
	for _, tc := range []struct {
		name     string
		url      string
		opts     []db.Option
		wantFile string // "" means Open must fail with ErrInvalidURL
	}{
		{"default from state dir", "", []db.Option{db.WithStateDir(filepath.Join(dir, "state"))}, filepath.Join(dir, "state", db.DefaultFileName)},
		{"DefaultURL", db.DefaultURL(filepath.Join(dir, "d2")), nil, filepath.Join(dir, "d2", db.DefaultFileName)},
		{"sqlite relative", "sqlite://rel/a.db", nil, filepath.Join(dir, "rel", "a.db")},
		{"plain path", filepath.Join(dir, "plain.db"), nil, filepath.Join(dir, "plain.db")},
		{"empty without state dir", "", nil, ""},
		{"unknown scheme", "mysql://localhost/x", nil, ""},
		{"sqlite without path", "sqlite://", nil, ""},
		{"query in path", "sqlite:///tmp/x.db?_pragma=foreign_keys(0)", nil, ""},
		{"memory", ":memory:", nil, ""},
		{"sqlite uri", "file:x.db", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := db.Open(ctx, tc.url, tc.opts...)
			if tc.wantFile == "" {
				if !errors.Is(err, db.ErrInvalidURL) {
					if s != nil {
						s.Close()
					}
					t.Fatalf("Open(%q) = %v, want ErrInvalidURL", tc.url, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open(%q): %v", tc.url, err)
			}
			defer s.Close()
			// Write something so the WAL and shared-memory files exist.
			if err := s.CreateInstance(ctx, newInstance("m1")); err != nil {
				t.Fatal(err)
			}
			for _, suffix := range []string{"", "-wal", "-shm"} {
				fi, err := os.Stat(tc.wantFile + suffix)
				if err != nil {
					t.Fatalf("database file: %v", err)
				}
				if perm := fi.Mode().Perm(); perm != 0o600 {
					t.Errorf("%s has mode %o, want 600", fi.Name(), perm)
				}
			}
		})
	}
}

func TestOpenTightensExistingFileMode(t *testing.T) {
	ctx := testContext(t)
	path := filepath.Join(t.TempDir(), "loose.db")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := db.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("mode %o, want 600", perm)
	}
}

func TestOpenPostgresUnreachable(t *testing.T) {
	ctx := testContext(t)
	url := "postgres://nobody@/x?host=" + t.TempDir() + "&sslmode=disable&connect_timeout=5"
	s, err := db.Open(ctx, url)
	if err == nil {
		s.Close()
		t.Fatal("Open on a socket nobody listens on succeeded")
	}
}

// rawDB opens url with plain gorm, bypassing the Store, to inspect or
// tamper with the schema.
func rawDB(t *testing.T, url string) *gorm.DB {
	t.Helper()
	var d gorm.Dialector
	if strings.HasPrefix(url, "postgres://") {
		d = postgres.Open(url)
	} else {
		d = sqlite.Open(strings.TrimPrefix(url, "sqlite://"))
	}
	g, err := gorm.Open(d, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := g.DB(); err == nil {
			sqlDB.Close()
		}
	})
	return g
}

func TestMigrations(t *testing.T) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			t.Run("open twice keeps data", func(t *testing.T) {
				ctx := testContext(t)
				url := e.URL(t)
				s1, err := db.Open(ctx, url)
				if err != nil {
					t.Fatal(err)
				}
				in := newInstance("persist")
				if err := s1.CreateInstance(ctx, in); err != nil {
					t.Fatal(err)
				}
				if err := s1.Close(); err != nil {
					t.Fatal(err)
				}
				s2 := dbtest.Open(t, url)
				got, err := s2.GetInstance(ctx, "persist")
				if err != nil || got.UUID != in.UUID {
					t.Fatalf("after reopen: %v, %v", got, err)
				}
				var n int64
				if err := rawDB(t, url).Table("migrations").Count(&n).Error; err != nil || n != int64(db.MigrationCount) {
					t.Errorf("migrations table has %d rows (err %v), want %d", n, err, db.MigrationCount)
				}
			})
			t.Run("concurrent opens", func(t *testing.T) {
				ctx := testContext(t)
				url := e.URL(t)
				const opens = 4
				stores := make([]db.Store, opens)
				errs := make([]error, opens)
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i := range opens {
					wg.Go(func() {
						<-start
						stores[i], errs[i] = db.Open(ctx, url)
					})
				}
				close(start)
				wg.Wait()
				for i, err := range errs {
					if err != nil {
						t.Errorf("Open #%d: %v", i, err)
						continue
					}
					t.Cleanup(func() { stores[i].Close() })
				}
				if t.Failed() {
					return
				}
				for i, s := range stores {
					if err := s.CreateInstance(ctx, newInstance(fmt.Sprintf("c%d", i))); err != nil {
						t.Errorf("store #%d: %v", i, err)
					}
				}
				list, err := stores[0].ListInstances(ctx, db.InstanceFilter{})
				if err != nil || len(list) != opens {
					t.Errorf("ListInstances: %d instances, err %v; want %d", len(list), err, opens)
				}
			})
			t.Run("schema from the future", func(t *testing.T) {
				ctx := testContext(t)
				url := e.URL(t)
				s, err := db.Open(ctx, url)
				if err != nil {
					t.Fatal(err)
				}
				s.Close()
				if err := rawDB(t, url).Exec("INSERT INTO migrations (id) VALUES ('299912310000_future')").Error; err != nil {
					t.Fatal(err)
				}
				s, err = db.Open(ctx, url)
				if !errors.Is(err, db.ErrSchemaTooNew) {
					if s != nil {
						s.Close()
					}
					t.Fatalf("Open = %v, want ErrSchemaTooNew", err)
				}
			})
		})
	}
}

func TestOpenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s, err := db.Open(ctx, dbtest.SQLiteURL(t))
	if err == nil {
		s.Close()
		t.Fatal("Open with a cancelled context succeeded")
	}
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			url := e.URL(t)
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			ctx := testContext(t)
			s, err := db.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.AppendEvent(ctx, &events.Record{Type: "lifecycle"}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.EventsAfter(ctx, 0, 0); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
