package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/guestlink/guestlink/agent/upstream"
	"github.com/guestlink/guestlink/link/advert"
	"github.com/guestlink/guestlink/link/devlxdapi"
	"github.com/guestlink/guestlink/link/hybrid"
	"github.com/guestlink/guestlink/link/transport"
)

// The load generator of the daemon-level benchmarks: it plays the agents of
// many sim guests over their guest links (benchAgentPlayer).

// benchAgentPlayer plays the agent of one running sim guest without running
// it: with the guest's own agent.crt/agent.key and the advertisement in its
// agent.conf (both from the config drive, <guest dir>/rootfs/run/
// guestlink-agent/), it talks to the daemon's devlxd handlers on the hybrid
// socket the daemon listens on for that guest (<guest dir>/link.sock_<port>),
// in the agent's own request form (agent/upstream: TLS, pinned daemon
// certificate, kept-alive connection). It can also write ring words into the
// guest's wired serial port, as the agent does.
//
// The dashboard benchmark can reuse it: start sim guests whose sim.command is
// "exec sleep 3600", then call benchNewAgentPlayer(name, guestDir, false) for each one
// (guest_dir is in the instance's details) and Ready().
type benchAgentPlayer struct {
	Name     string
	GuestDir string
	up       *upstream.Client
	cert     tls.Certificate

	stop    chan struct{}
	stopped sync.WaitGroup
	ln      *hybrid.Listener
	srv     *http.Server
}

// benchNewAgentPlayer prepares the player of the running guest in guestDir;
// perRequestTLS makes it handshake TLS for every request, as the agent's
// --tls-per-request mode does.
func benchNewAgentPlayer(name, guestDir string, perRequestTLS bool) (*benchAgentPlayer, error) {
	cfgDir := filepath.Join(guestDir, "rootfs", "run", "guestlink-agent")
	cert, err := tls.LoadX509KeyPair(filepath.Join(cfgDir, "agent.crt"), filepath.Join(cfgDir, "agent.key"))
	if err != nil {
		return nil, fmt.Errorf("loading agent key pair of instance %q: %w", name, err)
	}
	conf, err := os.ReadFile(filepath.Join(cfgDir, "agent.conf"))
	if err != nil {
		return nil, fmt.Errorf("reading agent.conf of instance %q: %w", name, err)
	}
	adv, err := advert.Parse(conf)
	if err != nil {
		return nil, fmt.Errorf("agent.conf of instance %q: %w", name, err)
	}
	link, err := transport.Parse("hybrid:" + filepath.Join(guestDir, "link.sock"))
	if err != nil {
		return nil, fmt.Errorf("link of instance %q: %w", name, err)
	}
	up := upstream.New(upstream.Options{Link: link, Certificate: cert, PerRequestTLS: perRequestTLS})
	if err := up.SetAdvertisement(adv); err != nil {
		return nil, fmt.Errorf("advertisement of instance %q: %w", name, err)
	}
	return &benchAgentPlayer{Name: name, GuestDir: guestDir, up: up, cert: cert, stop: make(chan struct{})}, nil
}

// Get sends GET path to the daemon and fails unless it answers 200.
func (p *benchAgentPlayer) Get(ctx context.Context, path string) error {
	env, err := p.up.Do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return fmt.Errorf("GET %s for instance %q: %w", path, p.Name, err)
	}
	if env.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s for instance %q: answered %d %q", path, p.Name, env.ErrorCode, env.Error)
	}
	return nil
}

// SetState sends PATCH /1.0 {"state": state} (devlxdapi.StateReady or
// StateStarted) and fails unless the daemon accepted it.
func (p *benchAgentPlayer) SetState(ctx context.Context, state string) error {
	body := []byte(`{"state":"` + state + `"}`)
	env, err := p.up.Do(ctx, http.MethodPatch, "/1.0", body)
	if err != nil {
		return fmt.Errorf("PATCH /1.0 %s for instance %q: %w", state, p.Name, err)
	}
	if env.Type == devlxdapi.TypeError || env.StatusCode != http.StatusOK {
		return fmt.Errorf("PATCH /1.0 %s for instance %q: answered %d %q", state, p.Name, env.ErrorCode, env.Error)
	}
	return nil
}

// WriteWord writes a ring word line ("STARTED", "CONNECTED", "STOPPED")
// into the guest's wired serial port (com.canonical.lxd).
func (p *benchAgentPlayer) WriteWord(word string) error {
	port := filepath.Join(p.GuestDir, "rootfs", "dev", "virtio-ports", "com.canonical.lxd")
	f, err := os.OpenFile(port, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("opening serial port of instance %q: %w", p.Name, err)
	}
	defer f.Close()
	if _, err := f.Write([]byte(word + "\n")); err != nil {
		return fmt.Errorf("writing %s to instance %q: %w", word, p.Name, err)
	}
	return nil
}

// Connect plays the agent's start-up and keeps it connected: it serves the
// agent's link port (8443) on the guest's hybrid socket with TLS (agent
// certificate; the daemon's client certificate from server.crt required),
// writes STARTED, answers the daemon's advertisement (PUT /1.0) and then
// writes CONNECTED, and repeats CONNECTED every heartbeat, as the agent does,
// until Close.
func (p *benchAgentPlayer) Connect(heartbeat time.Duration) error {
	cfgDir := filepath.Join(p.GuestDir, "rootfs", "run", "guestlink-agent")
	pemData, err := os.ReadFile(filepath.Join(cfgDir, "server.crt"))
	if err != nil {
		return fmt.Errorf("reading server.crt of instance %q: %w", p.Name, err)
	}
	block, _ := pem.Decode(pemData)
	if block == nil {
		return fmt.Errorf("server.crt of instance %q holds no PEM block", p.Name)
	}
	daemonClient := block.Bytes
	ln, err := hybrid.Listen(filepath.Join(p.GuestDir, "link.sock"))
	if err != nil {
		return fmt.Errorf("serving the link of instance %q: %w", p.Name, err)
	}
	p.ln = ln
	tlsConf := &tls.Config{
		Certificates: []tls.Certificate{p.cert},
		ClientAuth:   tls.RequireAnyClientCert,
		MinVersion:   tls.VersionTLS12,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], daemonClient) {
				return errors.New("client certificate is not the daemon's")
			}
			return nil
		},
	}
	ok, _ := devlxdapi.SyncResponse(nil)
	p.srv = &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(io.LimitReader(r.Body, advert.MaxSize+1))
			if err != nil {
				return
			}
			if r.Method == http.MethodPut && r.URL.Path == "/1.0" {
				a, err := advert.Parse(body)
				if err != nil {
					w.WriteHeader(http.StatusBadRequest)
					_, _ = w.Write(devlxdapi.ErrorResponse(http.StatusBadRequest, err.Error()))
					return
				}
				if err := p.up.SetAdvertisement(a); err != nil {
					w.WriteHeader(http.StatusInternalServerError)
					_, _ = w.Write(devlxdapi.ErrorResponse(http.StatusInternalServerError, err.Error()))
					return
				}
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(ok)
			if r.Method == http.MethodPut {
				if f, isFlusher := w.(http.Flusher); isFlusher {
					f.Flush()
				}
				_ = p.WriteWord("CONNECTED")
			}
		}),
	}
	p.stopped.Add(2)
	go func() {
		defer p.stopped.Done()
		_ = p.srv.Serve(tls.NewListener(ln.Port(8443), tlsConf))
	}()
	go func() {
		defer p.stopped.Done()
		t := time.NewTicker(heartbeat)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				_ = p.WriteWord("CONNECTED")
			}
		}
	}()
	return p.WriteWord("STARTED")
}

// Close stops playing the agent and drops the player's connections.
func (p *benchAgentPlayer) Close() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
		if p.srv != nil {
			_ = p.srv.Close()
			_ = p.ln.Close()
		}
		p.stopped.Wait()
	}
	p.up.CloseIdleConnections()
}
