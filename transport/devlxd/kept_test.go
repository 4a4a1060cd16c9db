package devlxd

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/link/devlxdapi"
)

// getOn sends GET /1.0 on a kept connection and reports whether it was
// answered (2xx) on it.
func getOn(c *tls.Conn) error {
	return answered(c, []byte("GET /1.0 HTTP/1.1\r\nHost: guestlink\r\n\r\n"))
}

// closedByServer waits for the server to close c (its read ends) and
// reports whether it did (rather than sending anything).
func closedByServer(c *tls.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.Read(make([]byte, 1))
	return n == 0 && !errors.Is(err, os.ErrDeadlineExceeded)
}

// The daemon keeps at most KeptMemory / KeptConnBytes idle connections:
// past it the one idle the longest is closed, and requests are still
// answered. Tried: a budget of 2 with 4 connections kept in turn (the two
// oldest closed by the server, the two newest still answer on the same
// connection), the agent's own connection closed under it (its next
// declaration answered without an error, on a new connection), a budget of
// none (each connection closed once answered), and CloseOldestIdle (what a
// link needing a descriptor calls: the oldest closed, false when none is
// idle), and the server's shutdown (the kept connection closed).
func TestKeptConnectionsBudget(t *testing.T) {
	t.Run("oldest-closed", func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.KeptMemory = 2 * KeptConnBytes })
		conf := e.tlsConfig(e.agents["a"])
		var conns []*tls.Conn
		t.Cleanup(func() {
			for _, c := range conns {
				c.Close()
			}
		})
		for i := range 4 {
			conns = append(conns, keptConn(t, e, conf))
			// Idle in order: each is idle before the next one is made.
			testwait.For(t, "the connection idle", 10*time.Second, func() bool {
				st := e.srv.KeptConnections()
				return st.Idle+int(st.Closed) == i+1
			})
		}
		for i, c := range conns[:2] {
			if !closedByServer(c) {
				t.Fatalf("connection %d (idle the longest) not closed over the budget of 2", i)
			}
		}
		for i, c := range conns[2:] {
			if err := getOn(c); err != nil {
				t.Fatalf("connection %d within the budget: GET on it: %v", i+2, err)
			}
		}
		if st := e.srv.KeptConnections(); st.Budget != 2 || st.Closed != 2 || st.Idle > 2 {
			t.Fatalf("KeptConnections = %+v, want budget 2, 2 closed, at most 2 idle", st)
		}
	})
	t.Run("agent-declares-after-its-connection-closed", func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.KeptMemory = KeptConnBytes; c.StateRate, c.StateBurst = 1e9, 1e9 })
		up := e.agentClient(t, uuidA, "a", false)
		ctx := context.Background()
		if err := up.Probe(ctx); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, "the agent's connection idle", 10*time.Second, func() bool { return e.srv.KeptConnections().Idle == 1 })
		other := keptConn(t, e, e.tlsConfig(e.agents["a"])) // the agent's is now over the budget of 1
		defer other.Close()
		testwait.For(t, "the agent's connection closed", 10*time.Second, func() bool { return e.srv.KeptConnections().Closed == 1 })
		for range 3 {
			env, err := up.Do(ctx, http.MethodPatch, "/1.0", []byte(`{"state":"Ready"}`))
			if err != nil || env.Type != devlxdapi.TypeSync {
				t.Fatalf("declaration after the daemon closed the agent's kept connection: %+v, %v", env, err)
			}
		}
		if n := len(e.insts.readyCalls()); n != 3 {
			t.Fatalf("%d declarations recorded, want 3 (none replayed, none lost)", n)
		}
	})
	t.Run("none-kept", func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.KeptMemory = -1 })
		c := keptConn(t, e, e.tlsConfig(e.agents["a"]))
		defer c.Close()
		if !closedByServer(c) {
			t.Fatal("connection kept with KeptMemory < 0")
		}
		if st := e.srv.KeptConnections(); st.Budget != 0 {
			t.Fatalf("budget %d, want 0", st.Budget)
		}
	})
	t.Run("closed-by-shutdown", func(t *testing.T) {
		// A daemon's stop (and so its restart) closes every kept
		// connection: none is carried to the next daemon.
		e := newEnv(t, nil)
		c := keptConn(t, e, e.tlsConfig(e.agents["a"]))
		defer c.Close()
		testwait.For(t, "the connection idle", 10*time.Second, func() bool { return e.srv.KeptConnections().Idle == 1 })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.srv.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if !closedByServer(c) {
			t.Fatal("a kept connection outlived the server's shutdown")
		}
	})
	t.Run("close-oldest-idle", func(t *testing.T) {
		e := newEnv(t, nil)
		if e.srv.CloseOldestIdle() {
			t.Fatal("CloseOldestIdle with no connection reported one closed")
		}
		conf := e.tlsConfig(e.agents["a"])
		first := keptConn(t, e, conf)
		defer first.Close()
		testwait.For(t, "the first connection idle", 10*time.Second, func() bool { return e.srv.KeptConnections().Idle == 1 })
		second := keptConn(t, e, conf)
		defer second.Close()
		testwait.For(t, "the second connection idle", 10*time.Second, func() bool { return e.srv.KeptConnections().Idle == 2 })
		if !e.srv.CloseOldestIdle() {
			t.Fatal("CloseOldestIdle with two idle connections closed none")
		}
		if !closedByServer(first) {
			t.Fatal("the oldest idle connection was not the one closed")
		}
		if err := getOn(second); err != nil {
			t.Fatalf("the newer connection: %v", err)
		}
	})
}
