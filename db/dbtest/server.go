package dbtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/guestlink/guestlink/internal/testenv"
)

// Server is a private PostgreSQL server of one test, which the test may
// restart or whose connections it may cut (the shared server of
// PostgresURL serves every test of the binary at once).
type Server struct {
	c *cluster
	n int
}

// NewServer starts a private server, stopped when the test ends. Like
// PostgresURL it skips without the server binaries (fails with CI=true).
func NewServer(t testing.TB) *Server {
	t.Helper()
	c, err := startCluster()
	if errors.Is(err, errNoPostgres) {
		testenv.Requires(t, "PostgreSQL", err.Error())
	}
	if err != nil {
		t.Fatalf("starting a private PostgreSQL server: %v", err)
	}
	t.Cleanup(c.stop)
	return &Server{c: c}
}

// URL creates a new database on the server and returns its URL.
func (s *Server) URL(t testing.TB) string {
	t.Helper()
	s.n++
	name := fmt.Sprintf("private_%d_%d", os.Getpid(), s.n)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := s.c.exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("creating database %s: %v", name, err)
	}
	return s.c.url(name)
}

// Restart stops the server (immediate: SIGQUIT, as a crash; else a fast
// shutdown) and starts it again on the same data.
func (s *Server) Restart(t testing.TB, immediate bool) {
	t.Helper()
	sig := syscall.SIGINT
	if immediate {
		sig = syscall.SIGQUIT
	}
	s.c.halt(sig)
	if err := s.c.run(); err != nil {
		t.Fatalf("restarting PostgreSQL: %v", err)
	}
}

// Stop stops the server (fast shutdown); Start starts it again.
func (s *Server) Stop(t testing.TB) { s.c.halt(syscall.SIGINT) }

// Start starts a stopped server again.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if err := s.c.run(); err != nil {
		t.Fatalf("starting PostgreSQL again: %v", err)
	}
}

// TerminateConnections ends every other connection to the server, as an
// administrator or a failover would (pg_terminate_backend).
func (s *Server) TerminateConnections(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := s.c.exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"); err != nil {
		t.Fatalf("terminating connections: %v", err)
	}
}
