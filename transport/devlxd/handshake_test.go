package devlxd

import (
	"crypto/tls"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// waitUntil polls cond (the server's own counters) until it holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// stall opens n connections on the link of uuid that never send a byte:
// each holds a handshake token until it is closed (or ReadHeaderTimeout).
func (e *env) stall(t *testing.T, uuid string, n int) []net.Conn {
	t.Helper()
	var out []net.Conn
	for range n {
		c, err := net.Dial("unix", e.socks[uuid])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		out = append(out, c)
	}
	return out
}

// handshake dials the link of uuid and runs the client's handshake in the
// background; the result arrives on the channel.
func (e *env) handshake(t *testing.T, uuid, agent string) <-chan error {
	t.Helper()
	raw, err := net.Dial("unix", e.socks[uuid])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	done := make(chan error, 1)
	go func() {
		tc := tls.Client(raw, e.tlsConfig(e.agents[agent]))
		_ = tc.SetDeadline(time.Now().Add(30 * time.Second))
		done <- tc.Handshake()
	}()
	return done
}

func closeAll(cs []net.Conn) {
	for _, c := range cs {
		c.Close()
	}
}

// TestHandshakeAdmission: TLS handshakes run at most MaxHandshakes at once,
// at most two per instance, the newest waiting connection first, and a
// connection that waits MaxHandshakeWait without a token is closed without
// a handshake.
func TestHandshakeAdmission(t *testing.T) {
	t.Run("one instance's stalled handshakes leave the others room", func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.MaxHandshakes = 4 })
		// a holds its two tokens with stalled connections; three more wait
		// for a's tokens, not for the server's.
		stalled := e.stall(t, uuidA, 5)
		waitUntil(t, "three of a's connections wait", func() bool { return e.srv.hsWaiting.Load() == 3 })
		if got := do(t, e.client(uuidB, e.agents["b"]), http.MethodGet, "/1.0", ""); got.status != http.StatusOK {
			t.Fatalf("b's GET /1.0 while a stalls: %d %s", got.status, got.body)
		}
		closeAll(stalled)
	})
	t.Run("past the limit a handshake waits for a token", func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.MaxHandshakes = 1 })
		stalled := e.stall(t, uuidA, 1)
		waitUntil(t, "a holds the only token", func() bool { return e.srv.handshakes.inUse() == 1 })
		done := e.handshake(t, uuidB, "b")
		waitUntil(t, "b waits", func() bool { return e.srv.hsWaiting.Load() == 1 })
		select {
		case err := <-done:
			t.Fatalf("b's handshake ended while a held the only token: %v", err)
		default:
		}
		closeAll(stalled)
		if err := <-done; err != nil {
			t.Fatalf("b's handshake once a's token was free: %v", err)
		}
	})
	t.Run("a connection that waits too long is closed unanswered", func(t *testing.T) {
		const wait = 50 * time.Millisecond
		e := newEnv(t, func(c *Config) { c.MaxHandshakes = 1; c.MaxHandshakeWait = wait })
		stalled := e.stall(t, uuidA, 1)
		waitUntil(t, "a holds the only token", func() bool { return e.srv.handshakes.inUse() == 1 })
		began := time.Now()
		if err := <-e.handshake(t, uuidB, "b"); err == nil {
			t.Fatal("b's handshake succeeded while a held the only token")
		}
		if waited := time.Since(began); waited < wait {
			t.Fatalf("b's connection was closed after %v, before MaxHandshakeWait (%v)", waited, wait)
		}
		if n := e.srv.hsStale.Load(); n != 1 {
			t.Fatalf("%d connections closed as stale, want 1", n)
		}
		closeAll(stalled)
		// The server still serves the next connection.
		if got := do(t, e.client(uuidB, e.agents["b"]), http.MethodGet, "/1.0", ""); got.status != http.StatusOK {
			t.Fatalf("GET /1.0 after a stale connection: %d %s", got.status, got.body)
		}
	})
	t.Run("the newest waiting connection goes first", func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.MaxHandshakes = 1 })
		// The server records the order it grants the token in: the order
		// the clients report their handshakes done is the scheduler's.
		var mu sync.Mutex
		var grants []string
		names := map[string]string{uuidA: "a", uuidB: "b", uuidOff: "off"}
		// Set under the pool's lock: the harness's connections may
		// already be in admit, which reads onGrant under it.
		e.srv.handshakes.mu.Lock()
		e.srv.handshakes.onGrant = func(who string) {
			mu.Lock()
			defer mu.Unlock()
			grants = append(grants, names[who])
		}
		e.srv.handshakes.mu.Unlock()
		granted := func() []string {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(grants)
		}
		stalled := e.stall(t, uuidA, 1)
		waitUntil(t, "a holds the only token", func() bool { return e.srv.handshakes.inUse() == 1 })
		older := e.handshake(t, uuidB, "b")
		waitUntil(t, "b waits", func() bool { return e.srv.handshakes.waiting() == 1 })
		newer := e.handshake(t, uuidOff, "off")
		waitUntil(t, "b and off wait", func() bool { return e.srv.handshakes.waiting() == 2 })
		closeAll(stalled)
		for name, done := range map[string]<-chan error{"b": older, "off": newer} {
			if err := <-done; err != nil {
				t.Errorf("%s's handshake: %v", name, err)
			}
		}
		if got, want := granted(), []string{"a", "off", "b"}; !slices.Equal(got, want) {
			t.Fatalf("the server granted the handshake token in the order %v; want %v (a, then off, the newest waiter, then b)", got, want)
		}
	})
}
