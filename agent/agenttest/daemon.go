package agenttest

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/link/advert"
	"github.com/guestlink/guestlink/link/devlxdapi"
	"github.com/guestlink/guestlink/link/hybrid"
)

// Daemon is a small fake of the daemon's devlxd handlers (envelope form),
// listening on the host side of a hybrid link (hybrid.HostPath(UDS, Port)),
// plus the daemon's client of the agent's link port. It answers only the
// agent certificate (401 otherwise). Its fields may be changed under Lock.
type Daemon struct {
	// UDS is the VMM socket of the hybrid link.
	UDS string
	// Port is the link port the daemon listens on.
	Port uint32
	// Certs is the instance's material.
	Certs *Certs

	sync.Mutex
	// Config is the instance config (user.*, cloud-init.*, others).
	Config map[string]string
	// Devices is the instance's devices.
	Devices map[string]map[string]string
	// Devlxd reports whether security.devlxd allows the API.
	Devlxd bool
	// Ready is the instance's ready flag.
	Ready bool
	// Patches lists the states PATCHed, in order.
	Patches []string
	// Declarations lists the PATCHed bodies (state, reason, message), in
	// order.
	Declarations []devlxdapi.StatePut
	// Requests counts the requests served.
	Requests int
	// Resumed counts the requests that came on a resumed TLS session.
	Resumed int
	// Conns counts the connections accepted.
	Conns int

	ln  net.Listener
	srv *http.Server
}

// StartDaemon starts a fake daemon for the agent whose VMM socket is uds.
func StartDaemon(t testing.TB, certs *Certs, uds string, port uint32) *Daemon {
	t.Helper()
	d := &Daemon{
		UDS:   uds,
		Port:  port,
		Certs: certs,
		Config: map[string]string{
			"user.foo":                 "bar",
			"user.multi":               "line one\nline two %s %d\n#cloud-config\n",
			"cloud-init.user-data":     "#cloud-config\nruncmd:\n - echo '%s' > /tmp/x\n",
			"cloud-init.ssh-keys.root": "root:ssh-ed25519 AAAA",
			"user.meta-data":           "extra: 1\n",
			"user.empty":               "",
			"volatile.uuid":            "9d2f",
			"security.devlxd":          "true",
		},
		Devices: map[string]map[string]string{
			"eth0": {"type": "nic", "network": "lxdbr0", "hwaddr": "00:16:3e:11:22:33"},
			"root": {"type": "disk", "path": "/", "pool": "default"},
		},
		Devlxd: true,
	}
	ln, err := net.Listen("unix", hybrid.HostPath(uds, port))
	if err != nil {
		t.Fatalf("fake daemon: listening: %v", err)
	}
	d.ln = tls.NewListener(ln, &tls.Config{
		Certificates: []tls.Certificate{certs.Daemon.TLS()},
		ClientAuth:   tls.RequireAnyClientCert,
		MinVersion:   tls.VersionTLS12,
	})
	d.srv = &http.Server{
		Handler:           http.HandlerFunc(d.serve),
		ReadHeaderTimeout: 5 * time.Second,
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				d.Lock()
				d.Conns++
				d.Unlock()
			}
		},
	}
	go func() { _ = d.srv.Serve(d.ln) }()
	t.Cleanup(d.Close)
	return d
}

// Close stops the daemon's listener and connections.
func (d *Daemon) Close() {
	_ = d.srv.Close()
}

// Advertisement returns what the daemon advertises.
func (d *Daemon) Advertisement() *advert.Advertisement {
	d.Lock()
	defer d.Unlock()
	return &advert.Advertisement{CID: 2, Port: d.Port, Certificate: string(d.Certs.Daemon.CertPEM), Devlxd: d.Devlxd}
}

func (d *Daemon) write(w http.ResponseWriter, code int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

func (d *Daemon) fail(w http.ResponseWriter, code int, msg string) {
	d.write(w, code, devlxdapi.ErrorResponse(code, msg))
}

func (d *Daemon) ok(w http.ResponseWriter, v any) {
	b, err := devlxdapi.SyncResponse(v)
	if err != nil {
		d.fail(w, http.StatusInternalServerError, err.Error())
		return
	}
	d.write(w, http.StatusOK, b)
}

func (d *Daemon) serve(w http.ResponseWriter, r *http.Request) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || !bytes.Equal(r.TLS.PeerCertificates[0].Raw, d.Certs.Agent.DER()) {
		d.fail(w, http.StatusUnauthorized, "Unauthorized")
		return
	}
	d.Lock()
	defer d.Unlock()
	d.Requests++
	if r.TLS.DidResume {
		d.Resumed++
	}
	if !d.Devlxd {
		d.fail(w, http.StatusForbidden, "")
		return
	}
	path := r.URL.Path
	switch {
	case r.Method == http.MethodGet && path == "/":
		d.ok(w, []string{"/1.0"})
	case r.Method == http.MethodGet && path == "/1.0":
		d.ok(w, devlxdapi.NewInfo(d.Ready, "testhost", devlxdapi.InstanceTypeVM))
	case r.Method == http.MethodPatch && path == "/1.0":
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		var put devlxdapi.StatePut
		if err := json.Unmarshal(body, &put); err != nil {
			d.fail(w, http.StatusBadRequest, fmt.Sprintf("Invalid request body: %v", err))
			return
		}
		switch put.State {
		case devlxdapi.StateReady:
			d.Ready = true
		case devlxdapi.StateStarted:
			d.Ready = false
		default:
			d.fail(w, http.StatusBadRequest, fmt.Sprintf("Invalid state %q", put.State))
			return
		}
		d.Patches = append(d.Patches, put.State)
		d.Declarations = append(d.Declarations, put)
		d.ok(w, nil)
	case r.Method == http.MethodGet && path == "/1.0/config":
		var keys []string
		for k := range d.Config {
			if guestKey(k) && !strings.HasPrefix(k, "cloud-init.ssh-keys.") {
				keys = append(keys, "/1.0/config/"+k)
			}
		}
		sort.Strings(keys)
		d.ok(w, keys)
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/1.0/config/"):
		key := strings.TrimPrefix(path, "/1.0/config/")
		if !guestKey(key) {
			d.fail(w, http.StatusForbidden, "")
			return
		}
		v := d.Config[key]
		if v == "" {
			d.fail(w, http.StatusNotFound, "")
			return
		}
		d.ok(w, v)
	case r.Method == http.MethodGet && path == "/1.0/meta-data":
		d.ok(w, "instance-id: 9d2f\nlocal-hostname: web1\n"+d.Config["user.meta-data"])
	case r.Method == http.MethodGet && path == "/1.0/devices":
		d.ok(w, d.Devices)
	default:
		d.fail(w, http.StatusNotFound, "")
	}
}

func guestKey(k string) bool {
	return strings.HasPrefix(k, "user.") || strings.HasPrefix(k, "cloud-init.")
}

// AgentClient returns an HTTPS client of the agent's link port through the
// VMM socket, presenting client and pinning the agent certificate.
func (d *Daemon) AgentClient(client KeyPair) *http.Client {
	pinned := d.Certs.Agent.DER()
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return hybrid.Dial(ctx, d.UDS, 8443)
			},
			TLSClientConfig: &tls.Config{
				Certificates:       []tls.Certificate{client.TLS()},
				InsecureSkipVerify: true, //nolint:gosec // pinned below
				VerifyConnection: func(cs tls.ConnectionState) error {
					if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, pinned) {
						return fmt.Errorf("agent certificate mismatch")
					}
					return nil
				},
			},
			DisableKeepAlives: true,
		},
	}
}

// CallAgent sends method path with body to the agent's link port as the
// daemon and returns the status and body.
func (d *Daemon) CallAgent(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	return d.callAgent(ctx, method, path, body, nil)
}

func (d *Daemon) callAgent(ctx context.Context, method, path string, body []byte, header http.Header) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "https://agent"+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	maps.Copy(req.Header, header)
	resp, err := d.AgentClient(d.Certs.DaemonClient).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// Advertise sends PUT /1.0 with the daemon's advertisement to the agent.
func (d *Daemon) Advertise(ctx context.Context) (int, []byte, error) {
	return d.CallAgent(ctx, http.MethodPut, "/1.0", d.Advertisement().Marshal())
}

// AdvertiseInAnswer sends PUT /1.0 with the daemon's advertisement and
// advert.DeclarationHeader, as a daemon that records the declaration the
// agent hands back in its answer.
func (d *Daemon) AdvertiseInAnswer(ctx context.Context) (int, []byte, error) {
	return d.callAgent(ctx, http.MethodPut, "/1.0", d.Advertisement().Marshal(), http.Header{advert.DeclarationHeader: {"1"}})
}

// DeclarationsSeen returns a copy of the declarations PATCHed so far.
func (d *Daemon) DeclarationsSeen() []devlxdapi.StatePut {
	d.Lock()
	defer d.Unlock()
	return append([]devlxdapi.StatePut(nil), d.Declarations...)
}

// PatchesSeen returns a copy of the states PATCHed so far.
func (d *Daemon) PatchesSeen() []string {
	d.Lock()
	defer d.Unlock()
	return append([]string(nil), d.Patches...)
}
