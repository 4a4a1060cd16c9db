package devlxd

import (
	"crypto/ecdh"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/pki"
)

// threadCPU returns the CPU time the calling OS thread has used
// (getrusage RUSAGE_THREAD); with runtime.LockOSThread it is the calling
// goroutine's.
func threadCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sideCPU runs a TLS handshake between client and server configurations
// over a socket pair, each end on its own locked OS thread, and returns the CPU
// each end used and whether the session resumed. The client reads once
// after the handshake so that a TLS 1.3 ticket reaches its cache.
func sideCPU(tb testing.TB, client, server *tls.Config) (clientCPU, serverCPU time.Duration, resumed bool) {
	cc, sc := socketPair(tb)
	type result struct {
		cpu time.Duration
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		start := threadCPU(tb)
		s := tls.Server(sc, server)
		err := s.Handshake()
		if err == nil {
			_, err = s.Write([]byte{1}) // sends the ticket before the byte
		}
		cpu := threadCPU(tb) - start
		sc.Close()
		done <- result{cpu, err}
	}()
	runtime.LockOSThread()
	start := threadCPU(tb)
	c := tls.Client(cc, client)
	err := c.Handshake()
	if err == nil {
		_, err = c.Read(make([]byte, 1))
	}
	clientCPU = threadCPU(tb) - start
	runtime.UnlockOSThread()
	resumed = c.ConnectionState().DidResume
	cc.Close()
	r := <-done
	if err != nil || r.err != nil {
		tb.Fatal(errors.Join(err, r.err))
	}
	return clientCPU, r.cpu, resumed
}

// socketPair returns the two ends of a connected Unix socket pair: unlike
// net.Pipe they buffer, as the links do (a TLS server writes its tickets
// while its client writes its Finished).
func socketPair(tb testing.TB) (net.Conn, net.Conn) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			tb.Fatal(err)
		}
		conns[i] = c
	}
	return conns[0], conns[1]
}

// BenchmarkReadvertise measures, per end, the CPU of the two TLS handshakes
// of one guest's advertisement after a daemon restart: the agent's probe of
// devlxd (the daemon is the server: tlsFor) and the daemon's PUT /1.0 to
// the agent's link port (the daemon is the client, with its per-instance
// Ed25519 client certificate, X25519 alone, the agent's certificate
// pinned), each full (what a restart cost each before the ticket keys were
// kept: no session survived it; the PUT's still does) and resumed (the
// probe's now); the parse of an instance's two key pairs; and the floor of
// a handshake's end, one X25519 exchange (a key pair and a shared secret,
// which a resumed TLS 1.3 handshake still runs: Go has no PSK-only mode).
// It reports daemon-us/op and peer-us/op from each end's thread accounting
// (user and system time of the thread each end is locked to).
func BenchmarkReadvertise(b *testing.B) {
	now := time.Now()
	agent, err := pki.GeneratePair("a1", now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	client, err := pki.GeneratePair("a1", now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	e := newEnv(b, nil)
	devlxdServer := e.srv.tlsFor(uuidA)
	probeClient := func(cache tls.ClientSessionCache) *tls.Config {
		return &tls.Config{
			Certificates:       []tls.Certificate{agent.TLS},
			InsecureSkipVerify: true, //nolint:gosec // the daemon's certificate is pinned by the agent, as in agent/upstream
			ServerName:         "guestlink",
			ClientSessionCache: cache,
			MinVersion:         tls.VersionTLS13,
			CurvePreferences:   linkCurves, // as agent/upstream
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 || !e.daemon.Equal(cs.PeerCertificates[0]) {
					return errors.New("not the daemon")
				}
				return nil
			},
		}
	}
	agentServer := &tls.Config{
		Certificates: []tls.Certificate{agent.TLS},
		ClientAuth:   tls.RequireAnyClientCert,
		MinVersion:   tls.VersionTLS12,
		// As agent/control.TLSConfig.
		CurvePreferences: linkCurves,
	}
	putClient := func(cache tls.ClientSessionCache) *tls.Config {
		return &tls.Config{
			Certificates:       []tls.Certificate{client.TLS},
			ServerName:         "a1",
			CurvePreferences:   linkCurves,
			InsecureSkipVerify: true, //nolint:gosec // pinned in VerifyConnection, as core/agentmon's client
			ClientSessionCache: cache,
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 || !agent.Equal(cs.PeerCertificates[0]) {
					return errors.New("not the agent")
				}
				if !pki.ValidAt(cs.PeerCertificates[0], time.Now()) {
					return errors.New("agent certificate expired")
				}
				return nil
			},
		}
	}
	handshake := func(b *testing.B, client func(tls.ClientSessionCache) *tls.Config, server *tls.Config, resume bool) {
		cache := tls.NewLRUClientSessionCache(1)
		if resume {
			sideCPU(b, client(cache), server) // the ticket the others resume
		}
		var daemonCPU, peerCPU time.Duration
		b.ResetTimer()
		for range b.N {
			if !resume {
				cache = nil
			}
			c, s, resumed := sideCPU(b, client(cache), server)
			if resumed != resume {
				b.Fatalf("resumed %v, want %v", resumed, resume)
			}
			if server == devlxdServer {
				daemonCPU, peerCPU = daemonCPU+s, peerCPU+c
			} else {
				daemonCPU, peerCPU = daemonCPU+c, peerCPU+s
			}
		}
		b.ReportMetric(float64(daemonCPU.Microseconds())/float64(b.N), "daemon-us/op")
		b.ReportMetric(float64(peerCPU.Microseconds())/float64(b.N), "peer-us/op")
	}
	b.Run("probe/full", func(b *testing.B) { handshake(b, probeClient, devlxdServer, false) })
	b.Run("probe/resumed", func(b *testing.B) { handshake(b, probeClient, devlxdServer, true) })
	b.Run("put/full", func(b *testing.B) { handshake(b, putClient, agentServer, false) })
	b.Run("put/resumed", func(b *testing.B) { handshake(b, putClient, agentServer, true) })
	b.Run("floor/x25519", func(b *testing.B) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		peer, err := ecdh.X25519().GenerateKey(rand.Reader)
		if err != nil {
			b.Fatal(err)
		}
		start := threadCPU(b)
		for range b.N {
			k, err := ecdh.X25519().GenerateKey(rand.Reader)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := k.ECDH(peer.PublicKey()); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64((threadCPU(b)-start).Microseconds())/float64(b.N), "daemon-us/op")
	})
	b.Run("keys/parse", func(b *testing.B) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		start := threadCPU(b)
		for range b.N {
			for _, p := range []*pki.Pair{agent, client} {
				if _, err := pki.ParsePair(p.CertPEM, p.KeyPEM); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64((threadCPU(b)-start).Microseconds())/float64(b.N), "daemon-us/op")
	})
}
