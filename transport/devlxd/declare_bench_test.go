package devlxd

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/agent/upstream"
	"github.com/guestlink/guestlink/link/advert"
	"github.com/guestlink/guestlink/link/devlxdapi"
)

// unixLink is an agent's link in these benchmarks: every Dial connects to
// one instance's socket of the env, which the server serves as a link host
// hands it connections (ServeConn with the instance's identity).
type unixLink struct{ path string }

func (l unixLink) Listen(uint32) (net.Listener, error) {
	return nil, errors.New("unixLink: no listening")
}

func (l unixLink) Dial(ctx context.Context, _, _ uint32) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", l.path)
}

func (l unixLink) Kind() string { return "hybrid" }

// agentClient returns the agent's own client of the daemon (agent/upstream:
// its connection pool, its TLS configuration and session cache) for the
// instance uuid whose agent certificate is e.agents[name], the daemon
// advertised to it.
func (e *env) agentClient(tb testing.TB, uuid, name string, perRequest bool) *upstream.Client {
	tb.Helper()
	up := upstream.New(upstream.Options{Link: unixLink{e.socks[uuid]}, Certificate: e.agents[name].TLS, PerRequestTLS: perRequest})
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: e.daemon.DER})
	if err := up.SetAdvertisement(&advert.Advertisement{CID: 2, Port: 8443, Certificate: string(certPEM), Devlxd: true}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(up.CloseIdleConnections)
	return up
}

// processCPU is the CPU time (user and system) the test process used so far.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDeclare measures a guest's Ready declaration (PATCH /1.0) as the
// agent sends it to the daemon: the agent's client (agent/upstream) over a
// socket of the instance's link to the real devlxd server (admission, TLS,
// fasthttp, the identity check, the state budget, the handler), the
// instance service a fake (the store's part is db's
// BenchmarkStateChangeWrites). The connection cases:
//
//   - conn=kept: the agent's kept-alive connection (a declaration within
//     upstream.IdleTimeout of its previous request);
//   - conn=resumed: a new connection resuming the TLS session of the
//     previous one (what a Ready storm costs: the agent's connections
//     expired long before), one X25519 exchange and a new ticket;
//   - conn=full: a new connection and a full handshake (--tls-per-request,
//     LXD's way).
//
// cpu-us/op is the whole process's CPU (agent client and daemon server
// both) per declaration.
func BenchmarkDeclare(b *testing.B) {
	body := []byte(`{"state":"Ready"}`)
	for _, bc := range []struct {
		name       string
		perRequest bool
		dropIdle   bool
	}{
		{"conn=kept", false, false},
		{"conn=resumed", false, true},
		{"conn=full", true, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := newEnv(b, func(c *Config) { c.StateRate, c.StateBurst = 1e9, 1e9 })
			up := e.agentClient(b, uuidA, "a", bc.perRequest)
			ctx := context.Background()
			declare := func() {
				env, err := up.Do(ctx, http.MethodPatch, "/1.0", body)
				if err != nil {
					b.Fatal(err)
				}
				if env.Type != devlxdapi.TypeSync {
					b.Fatalf("PATCH /1.0 answered %+v", env)
				}
			}
			// The advertisement's check: the session (and its ticket)
			// the first declaration resumes.
			if err := up.Probe(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			cpu0 := processCPU(b)
			b.ResetTimer()
			for b.Loop() {
				if bc.dropIdle {
					up.CloseIdleConnections()
				}
				declare()
			}
			b.StopTimer()
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}

// BenchmarkKeptConnections measures what a kept-alive connection costs
// while its agent is idle (what keeping every agent's connection open
// costs; the server's budget is Config.KeptMemory, counted as
// KeptConnBytes each): n connections on the link of one instance, each
// with a TLS session and one answered GET /1.0, held by a minimal client (a
// tls.Conn and a 16-byte reader, no goroutine). The server cases:
//
//   - server=devlxd: the real server (TLS, fasthttp with ReduceMemoryUsage,
//     the kept connections' tracking);
//   - server=floor: the least a kept TLS connection costs with Go's
//     crypto/tls: a goroutine per connection that handshakes, reads the
//     request, writes a fixed answer and blocks reading the next one.
//
// It reports the heap and the stacks held per connection, the server's and
// the small client's together (the client's share is the same in both
// cases: the server's own is the difference to the floor plus the floor's
// server half), and the goroutines; each is one descriptor in the daemon
// besides. It measures once, whatever -benchtime says.
func BenchmarkKeptConnections(b *testing.B) {
	const n = 1000
	settle := func() runtime.MemStats {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms
	}
	for _, bc := range []struct {
		name  string
		floor bool
	}{{"server=devlxd", false}, {"server=floor", true}} {
		b.Run(bc.name, func(b *testing.B) {
			e := newEnv(b, nil)
			conf := e.tlsConfig(e.agents["a"])
			conf.ClientSessionCache = tls.NewLRUClientSessionCache(1) // as the agent: resumed sessions
			dial := func() *tls.Conn { return keptConn(b, e, conf) }
			if bc.floor {
				dial = floorServer(b, e, conf)
			}
			before, g0 := settle(), runtime.NumGoroutine()
			conns := make([]*tls.Conn, 0, n)
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			for range n {
				conns = append(conns, dial())
			}
			after, g1 := settle(), runtime.NumGoroutine()
			heap := float64(after.HeapInuse) - float64(before.HeapInuse)
			stack := float64(after.StackInuse) - float64(before.StackInuse)
			for b.Loop() {
			}
			b.ReportMetric((heap+stack)/n/1024, "KiB/conn")
			b.ReportMetric(heap/n/1024, "heap-KiB/conn")
			b.ReportMetric(stack/n/1024, "stack-KiB/conn")
			b.ReportMetric(float64(g1-g0)/n, "goroutines/conn")
		})
	}
}

// floorServer returns a dial of BenchmarkKeptConnections' floor: each
// connection is served by a bare TLS server goroutine with the devlxd
// server's TLS configuration (a handshake, one request read, a fixed answer,
// then a read that waits for the next), over a socket pair.
func floorServer(tb testing.TB, e *env, conf *tls.Config) func() *tls.Conn {
	sconf := e.srv.tlsFor(uuidA)
	answer := []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
	return func() *tls.Conn {
		pair, err := unixPair()
		if err != nil {
			tb.Fatal(err)
		}
		cs, ss := pair[0], pair[1]
		go func() {
			tc := tls.Server(ss, sconf)
			defer tc.Close()
			br := bufio.NewReaderSize(tc, 16)
			for {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				if _, err := tc.Write(answer); err != nil {
					return
				}
			}
		}()
		c := tls.Client(cs, conf)
		if _, err := c.Write([]byte("GET /1.0 HTTP/1.1\r\nHost: guestlink\r\n\r\n")); err != nil {
			c.Close()
			tb.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReaderSize(c, 16), nil)
		if err != nil {
			c.Close()
			tb.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return c
	}
}

// unixPair returns the two ends of a connected Unix socket pair, as a link's
// connection is one.
func unixPair() ([2]net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return [2]net.Conn{}, err
	}
	var out [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			return [2]net.Conn{}, err
		}
		out[i] = c
	}
	return out, nil
}

// keptConn opens a connection to instance A's devlxd socket, makes one GET
// /1.0 on it (which must answer 200) and returns it open: a kept-alive
// agent connection.
func keptConn(tb testing.TB, e *env, conf *tls.Config) *tls.Conn {
	tb.Helper()
	raw, err := net.Dial("unix", e.socks[uuidA])
	if err != nil {
		tb.Fatal(err)
	}
	c := tls.Client(raw, conf)
	if _, err := c.Write([]byte("GET /1.0 HTTP/1.1\r\nHost: guestlink\r\n\r\n")); err != nil {
		c.Close()
		tb.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 16), nil)
	if err != nil {
		c.Close()
		tb.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.Close()
		tb.Fatalf("GET /1.0: %d", resp.StatusCode)
	}
	return c
}

// BenchmarkSessionTicket measures what a resumed connection costs the daemon
// in tickets (one read, one issued: Go's TLS 1.3 server issues a new ticket
// on every connection, resumed or not), with Go's own ticket encryption
// (tls.Config.EncryptTicket and DecryptTicket: an AES-CTR cipher and an
// HMAC made per ticket) and with the server's (ticketKeys: a kept
// AES-256-GCM AEAD, the instance as additional data). The session is a real
// one of an agent's certificate, taken from a handshake.
func BenchmarkSessionTicket(b *testing.B) {
	e := newEnv(b, nil)
	var (
		cs tls.ConnectionState
		ss *tls.SessionState
	)
	conf := e.srv.tls.Clone()
	conf.WrapSession = func(c tls.ConnectionState, s *tls.SessionState) ([]byte, error) {
		cs, ss = c, s
		return conf.EncryptTicket(c, s)
	}
	client, server := net.Pipe()
	done := make(chan error, 1)
	go func() {
		tc := tls.Server(server, conf)
		err := tc.Handshake()
		if err == nil {
			_, err = tc.Write([]byte("x")) // the ticket goes out after the handshake
		}
		tc.Close()
		done <- err
	}()
	cconf := e.tlsConfig(e.agents["a"])
	cconf.ClientSessionCache = tls.NewLRUClientSessionCache(1) // asks for a ticket
	cc := tls.Client(client, cconf)
	if _, err := cc.Read(make([]byte, 1)); err != nil {
		b.Fatal(err)
	}
	cc.Close()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	if ss == nil {
		b.Fatal("no session state issued")
	}
	binding := []byte(ticketBindingPrefix + uuidA)
	b.Run("go", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			t, err := conf.EncryptTicket(cs, ss)
			if err != nil {
				b.Fatal(err)
			}
			if s, err := conf.DecryptTicket(t, cs); err != nil || s == nil {
				b.Fatalf("decrypt: %v", err)
			}
		}
	})
	b.Run("guestlink", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			state, err := ss.Bytes()
			if err != nil {
				b.Fatal(err)
			}
			t, err := e.srv.tickets.seal(state, binding)
			if err != nil {
				b.Fatal(err)
			}
			if s, err := tls.ParseSessionState(e.srv.tickets.open(t, binding)); err != nil || s == nil {
				b.Fatalf("open: %v", err)
			}
		}
	})
}
