package devlxd

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/guestlink/guestlink/core/statebudget"
	"github.com/guestlink/guestlink/internal/testwait"
)

// keptServerCost measures, in process, what n idle kept connections hold
// in the server alone, per connection: each opened as an agent keeps it
// (a TLS 1.3 session, a GET /1.0 and a declaration answered on it). The
// stacks: their growth from before the connections to every one idle
// (the clients run no goroutine). The heap: what it holds with every
// connection idle less what it holds once the server closed its ends (the
// budget's own close, CloseOldestIdle) and fasthttp let them go (its
// ConnState hook says closed); the clients' ends stay referenced, so the
// difference is the server's share. It returns the guest's certificate
// too (parsedCertCost).
func keptServerCost(tb testing.TB, n int) (heap, stack float64, certDER []byte) {
	tb.Helper()
	e := newEnv(tb, func(c *Config) {
		c.KeptMemory = int64(2*n) * KeptConnBytes
		c.StateBudget = statebudget.New(1e6, n) // one guest's n declarations, as n guests' one each
	})
	var released atomic.Int64
	srv := e.srv.app.Server()
	hook := srv.ConnState
	srv.ConnState = func(c net.Conn, st fasthttp.ConnState) {
		hook(c, st)
		if st == fasthttp.StateClosed {
			released.Add(1)
		}
	}
	conf := e.tlsConfig(e.agents["a"])
	conf.ClientSessionCache = tls.NewLRUClientSessionCache(1) // as the agent: resumed sessions
	conf.CurvePreferences = []tls.CurveID{tls.X25519}         // as the agent (agent/upstream)
	conns := make([]*tls.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	declare := []byte("PATCH /1.0 HTTP/1.1\r\nHost: guestlink\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{\"state\":\"Ready\"}")
	// One connection first, closed: the session the others resume.
	first := keptConn(tb, e, conf)
	first.Close()
	if !testwait.Until(10*time.Second, func() bool { return released.Load() == 1 }) {
		tb.Fatal("the server did not let the first connection go")
	}
	before := settle()
	for range n {
		c := keptConn(tb, e, conf)
		conns = append(conns, c)
		if err := answered(c, declare); err != nil {
			tb.Fatalf("declaration on a kept connection: %v", err)
		}
	}
	if !testwait.Until(10*time.Second, func() bool { idle, _, _ := e.srv.kept.stats(); return idle == n }) {
		idle, _, _ := e.srv.kept.stats()
		tb.Fatalf("%d connections idle and kept, want %d", idle, n)
	}
	open := settle()
	for e.srv.CloseOldestIdle() {
	}
	if !testwait.Until(10*time.Second, func() bool { return released.Load() == int64(n+1) }) {
		tb.Fatalf("the server let %d of the %d connections it closed go", released.Load()-1, n)
	}
	closed := settle()
	heap = (float64(open.HeapInuse) - float64(closed.HeapInuse)) / float64(n)
	stack = (float64(open.StackInuse) - float64(before.StackInuse)) / float64(n)
	return heap, stack, e.agents["a"].DER
}

// settle collects the garbage and returns the memory statistics.
func settle() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms
}

// parsedCertCost is what one parsed agent certificate holds in the heap,
// over n parsed and kept: a connection holds its peer's certificate
// parsed for its life (crypto/tls), and Go's TLS shares one parse among
// the connections of the same certificate, so keptServerCost, whose
// connections are one guest's, counts it once; in a daemon every guest's
// connection holds its own.
func parsedCertCost(tb testing.TB, der []byte, n int) float64 {
	tb.Helper()
	certs := make([]*x509.Certificate, n)
	before := settle()
	for i := range certs {
		c, err := x509.ParseCertificate(bytes.Clone(der))
		if err != nil {
			tb.Fatal(err)
		}
		certs[i] = c
	}
	after := settle()
	runtime.KeepAlive(certs)
	return (float64(after.HeapInuse) - float64(before.HeapInuse)) / float64(n)
}

// answered sends req on c and reads its answer, which must be 2xx.
func answered(c *tls.Conn, req []byte) error {
	if _, err := c.Write(req); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 16), nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return errors.New(resp.Status)
	}
	return nil
}

// TestKeptConnBytes: KeptConnBytes, what the budget (--devlxd-kept-memory)
// counts per idle kept connection, is at least what one costs the server,
// measured here over 400 connections (keptServerCost) plus the parsed
// certificate each guest's connection holds (parsedCertCost): the test
// fails if that cost drifts above the constant, so the budget never
// counts less than a connection holds in process.
func TestKeptConnBytes(t *testing.T) {
	heap, stack, der := keptServerCost(t, 400)
	cert := parsedCertCost(t, der, 400)
	cost := heap + stack + cert
	t.Logf("an idle kept connection holds %.1f KiB in the server (heap %.1f, stacks %.1f, its guest's parsed certificate %.1f); KeptConnBytes is %.1f KiB",
		cost/1024, heap/1024, stack/1024, cert/1024, float64(KeptConnBytes)/1024)
	if cost > KeptConnBytes {
		t.Errorf("an idle kept connection costs the server %.1f KiB, more than the %.1f KiB the budget counts (KeptConnBytes)",
			cost/1024, float64(KeptConnBytes)/1024)
	}
	if stack < 4<<10 || cert < 1<<10 {
		t.Errorf("the measure missed a part: stacks %.1f KiB (a serving goroutine each), certificate %.1f KiB", stack/1024, cert/1024)
	}
}

// swappableCerts is a Certs whose certificates and clock a test changes
// between requests.
type swappableCerts struct {
	mu    sync.Mutex
	certs fakeCerts
}

func (s *swappableCerts) AgentCertDER(name string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.certs.AgentCertDER(name)
}

func (s *swappableCerts) set(name string, der []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.certs[name] = der
}

// TestKeptConnectionIdentityPerRequest: a kept connection's identity is
// checked on every request, not once per connection: on one connection
// (never closed between the requests: each answer is read on it), a
// request is refused once its instance's agent certificate is another
// (the guest re-keyed, or the connection is not its agent's), answered
// again once it is the connection's, and refused once the certificate is
// past its validity by the daemon's clock; a declaration (PATCH /1.0) is
// refused as a read is.
func TestKeptConnectionIdentityPerRequest(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	certs := &swappableCerts{}
	e := newEnv(t, func(c *Config) {
		certs.certs = c.Certs.(fakeCerts)
		c.Certs = certs
		c.Now = func() time.Time { return time.Unix(0, now.Load()) }
	})
	a := e.agents["a"]
	c := keptConn(t, e, e.tlsConfig(a))
	defer c.Close()
	get := []byte("GET /1.0/config/user.foo HTTP/1.1\r\nHost: guestlink\r\n\r\n")
	declare := []byte("PATCH /1.0 HTTP/1.1\r\nHost: guestlink\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{\"state\":\"Ready\"}")
	for _, step := range []struct {
		name   string
		change func()
		req    []byte
		status int
	}{
		{"the agent's certificate", nil, get, http.StatusOK},
		{"the instance's certificate is another", func() { certs.set("a", e.agents["b"].DER) }, get, http.StatusUnauthorized},
		{"a declaration with another certificate", nil, declare, http.StatusUnauthorized},
		{"the agent's certificate again", func() { certs.set("a", a.DER) }, get, http.StatusOK},
		{"the certificate past its validity", func() { now.Store(time.Now().Add(2 * time.Hour).UnixNano()) }, get, http.StatusUnauthorized},
		{"a declaration past its validity", nil, declare, http.StatusUnauthorized},
		{"within its validity again", func() { now.Store(time.Now().UnixNano()) }, declare, http.StatusOK},
	} {
		if step.change != nil {
			step.change()
		}
		status, err := statusOn(c, step.req)
		if err != nil {
			t.Fatalf("%s: the kept connection: %v", step.name, err)
		}
		if status != step.status {
			t.Errorf("%s: %d on the kept connection, want %d", step.name, status, step.status)
		}
	}
}

// statusOn sends req on c and returns the answer's status, its body read.
func statusOn(c *tls.Conn, req []byte) (int, error) {
	if _, err := c.Write(req); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 16), nil)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}
