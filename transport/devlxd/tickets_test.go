package devlxd

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/pki"
)

// ticketClient dials an instance's link like the agent's upstream client:
// a TLS client with a session cache, one request per connection.
type ticketClient struct {
	e     *env
	cache tls.ClientSessionCache
}

// get sends GET path on a new connection to the link of uuid, presenting
// cert (nil: none) and offering any ticket in the client's cache; it
// returns the answer and whether the session was resumed.
func (tc *ticketClient) get(t *testing.T, uuid string, cert *pki.Pair, path string) (answer, bool) {
	t.Helper()
	c, err := net.Dial("unix", tc.e.socks[uuid])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	conf := &tls.Config{
		InsecureSkipVerify: true, //nolint:gosec // the test looks at the server's side
		ServerName:         "guestlink",
		ClientSessionCache: tc.cache,
		MinVersion:         tls.VersionTLS13,
	}
	if cert != nil {
		conf.Certificates = []tls.Certificate{cert.TLS}
	}
	conn := tls.Client(c, conf)
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if err := conn.Handshake(); err != nil {
		t.Fatalf("handshake on %s's link: %v", uuid, err)
	}
	resumed := conn.ConnectionState().DidResume
	if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: lxd\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	// The ticket arrives after the handshake, with the first answer: read
	// to the end so the cache holds it before the next dial.
	return answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(body)}, resumed
}

// TestSessionTickets checks TLS session resumption on guest links: a
// resumed session still carries the guest's certificate and passes the
// per-request identity check; a ticket issued on guest A's link never
// resumes on guest B's (B, with or without its own certificate, does not
// become A); the ticket keys rotate (a ticket outlives one rotation, not
// two); and a restarted server resumes no ticket of the previous one.
func TestSessionTickets(t *testing.T) {
	e := newEnv(t, nil)
	a, b := e.agents["a"], e.agents["b"]
	fooA, fooB := sync200(`"bar"`), sync200(`"b-secret"`)
	unauthorized := fail(401, "Unauthorized")

	type step struct {
		name        string
		link        string
		cert        *pki.Pair
		wantResumed bool
		want        answer
	}
	run := func(t *testing.T, tc *ticketClient, steps []step) {
		t.Helper()
		for _, s := range steps {
			got, resumed := tc.get(t, s.link, s.cert, "/1.0/config/user.foo")
			if resumed != s.wantResumed {
				t.Errorf("%s: resumed %v, want %v", s.name, resumed, s.wantResumed)
			}
			if got != s.want {
				t.Errorf("%s: got %+v, want %+v", s.name, got, s.want)
			}
		}
	}

	t.Run("resumed session carries the identity", func(t *testing.T) {
		tc := &ticketClient{e: e, cache: tls.NewLRUClientSessionCache(8)}
		run(t, tc, []step{
			{"first connection, full handshake", uuidA, a, false, fooA},
			{"second connection resumes as A", uuidA, a, true, fooA},
			// The ticket alone (no certificate configured) resumes A's
			// session, whose certificate is A's: it is A's credential.
			{"the ticket alone is A", uuidA, nil, true, fooA},
		})
	})

	t.Run("B presenting A's ticket does not become A", func(t *testing.T) {
		tc := &ticketClient{e: e, cache: tls.NewLRUClientSessionCache(8)}
		run(t, tc, []step{
			{"A gets a ticket", uuidA, a, false, fooA},
			{"A's ticket, no certificate, on B's link", uuidB, nil, false, unauthorized},
		})
		tc = &ticketClient{e: e, cache: tls.NewLRUClientSessionCache(8)}
		run(t, tc, []step{
			{"A gets a ticket", uuidA, a, false, fooA},
			{"A's ticket with B's certificate on B's link", uuidB, b, false, fooB},
			{"B's own ticket then resumes as B", uuidB, b, true, fooB},
		})
		tc = &ticketClient{e: e, cache: tls.NewLRUClientSessionCache(8)}
		run(t, tc, []step{
			{"B gets a ticket", uuidB, b, false, fooB},
			{"B's ticket with A's certificate on A's link", uuidA, a, false, fooA},
			// A's certificate on B's link: the certificate check of
			// every request refuses it, resumed or not.
			{"A's certificate on B's link", uuidB, a, false, unauthorized},
			{"A's ticket from B's link again", uuidB, a, true, unauthorized},
		})
	})

	t.Run("ticket keys rotate", func(t *testing.T) {
		// Two clients get a ticket under the same key; one uses it after
		// one rotation, the other after two.
		once := &ticketClient{e: e, cache: tls.NewLRUClientSessionCache(8)}
		twice := &ticketClient{e: e, cache: tls.NewLRUClientSessionCache(8)}
		run(t, once, []step{{"a ticket under the first key", uuidA, a, false, fooA}})
		run(t, twice, []step{{"another ticket under the first key", uuidA, a, false, fooA}})
		if err := e.srv.tickets.rotate(); err != nil {
			t.Fatal(err)
		}
		run(t, once, []step{{"after one rotation, the previous key still resumes", uuidA, a, true, fooA}})
		if err := e.srv.tickets.rotate(); err != nil {
			t.Fatal(err)
		}
		run(t, twice, []step{
			{"a ticket two keys old is refused", uuidA, a, false, fooA},
			{"the fresh ticket of that handshake resumes", uuidA, a, true, fooA},
		})
	})

	t.Run("restart invalidates tickets", func(t *testing.T) {
		tc := &ticketClient{e: e, cache: tls.NewLRUClientSessionCache(8)}
		run(t, tc, []step{{"A gets a ticket from the first server", uuidA, a, false, fooA}})
		// The same daemon certificate, a new server (as after a restart).
		e2 := newEnv(t, func(c *Config) { c.Certificate = e.daemon.TLS; c.Certs = fakeCerts{"a": a.DER, "b": b.DER} })
		tc.e = e2
		run(t, tc, []step{
			{"the old ticket on the new server", uuidA, a, false, fooA},
			{"the new server's own ticket", uuidA, a, true, fooA},
		})
	})
}

// TestTicketKeysSealOpen checks the ticket sealing under the sessions that
// TestSessionTickets resumes: a ticket opens only with the binding (the
// instance) it was sealed for, only unaltered, and only while its key is
// the current or the previous one.
func TestTicketKeysSealOpen(t *testing.T) {
	a, b := []byte(ticketBindingPrefix+uuidA), []byte(ticketBindingPrefix+uuidB)
	state := []byte("a session state")
	for _, tc := range []struct {
		name      string
		binding   []byte
		alter     func([]byte) []byte
		rotations int
		opens     bool
	}{
		{name: "same instance", binding: a, opens: true},
		{name: "another instance's link", binding: b},
		{name: "after one rotation", binding: a, rotations: 1, opens: true},
		{name: "after two rotations", binding: a, rotations: 2},
		{name: "a byte of the sealed state changed", binding: a, alter: func(t []byte) []byte { t[len(t)-20] ^= 1; return t }},
		{name: "a byte of the nonce changed", binding: a, alter: func(t []byte) []byte { t[0] ^= 1; return t }},
		{name: "truncated", binding: a, alter: func(t []byte) []byte { return t[:len(t)-1] }},
		{name: "shorter than a nonce", binding: a, alter: func(t []byte) []byte { return t[:5] }},
		{name: "empty", binding: a, alter: func([]byte) []byte { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var k ticketKeys
			if err := k.rotate(); err != nil {
				t.Fatal(err)
			}
			ticket, err := k.seal(state, a)
			if err != nil {
				t.Fatal(err)
			}
			if tc.alter != nil {
				ticket = tc.alter(ticket)
			}
			for range tc.rotations {
				if err := k.rotate(); err != nil {
					t.Fatal(err)
				}
			}
			got := k.open(ticket, tc.binding)
			if tc.opens && !bytes.Equal(got, state) {
				t.Fatalf("open = %q, want %q", got, state)
			}
			if !tc.opens && got != nil {
				t.Fatalf("open = %q, want nothing", got)
			}
		})
	}
	t.Run("another server's key", func(t *testing.T) {
		var k1, k2 ticketKeys
		if err := k1.rotate(); err != nil {
			t.Fatal(err)
		}
		if err := k2.rotate(); err != nil {
			t.Fatal(err)
		}
		ticket, err := k1.seal(state, a)
		if err != nil {
			t.Fatal(err)
		}
		if got := k2.open(ticket, a); got != nil {
			t.Fatalf("another server's key opened %q", got)
		}
	})
}
