package devlxd

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/linkhost"
	"github.com/guestlink/guestlink/core/pki"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// fakeInstances is an in-memory Instances.
type fakeInstances struct {
	mu    sync.Mutex
	byID  map[string]*instance.Instance
	calls []readyCall
}

type readyCall struct {
	uuid  string
	ready bool
	by    events.Requestor
}

func (f *fakeInstances) GetByUUID(_ context.Context, uuid string) (*instance.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	inst, ok := f.byID[uuid]
	if !ok {
		return nil, fmt.Errorf("instance %q: %w", uuid, errdefs.ErrNotFound)
	}
	cp := *inst
	cp.Config = map[string]string{}
	for k, v := range inst.Config {
		cp.Config[k] = v
	}
	return &cp, nil
}

func (f *fakeInstances) Get(ctx context.Context, name string) (*instance.Instance, error) {
	f.mu.Lock()
	var uuid string
	for id, inst := range f.byID {
		if inst.Name == name {
			uuid = id
		}
	}
	f.mu.Unlock()
	if uuid == "" {
		return nil, fmt.Errorf("instance %q: %w", name, errdefs.ErrNotFound)
	}
	return f.GetByUUID(ctx, uuid)
}

func (f *fakeInstances) SetReady(_ context.Context, uuid string, ready bool, by events.Requestor) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	inst, ok := f.byID[uuid]
	if !ok {
		return fmt.Errorf("instance %q: %w", uuid, errdefs.ErrNotFound)
	}
	inst.Config["volatile.last_state.ready"] = fmt.Sprint(ready)
	f.calls = append(f.calls, readyCall{uuid, ready, by})
	return nil
}

func (f *fakeInstances) setConfig(uuid, key, value string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.byID[uuid].Config[key] = value
}

func (f *fakeInstances) readyCalls() []readyCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]readyCall(nil), f.calls...)
}

// fakeCerts maps instance names to agent certificates.
type fakeCerts map[string][]byte

func (f fakeCerts) AgentCertDER(name string) ([]byte, error) {
	c, ok := f[name]
	if !ok {
		return nil, fmt.Errorf("agent certificate of %q: %w", name, errdefs.ErrNotFound)
	}
	return c, nil
}

type env struct {
	t      testing.TB
	srv    *Server
	insts  *fakeInstances
	daemon *pki.Pair
	agents map[string]*pki.Pair // by instance name
	socks  map[string]string    // link socket path by instance UUID
}

const (
	uuidA    = "0b0e8e52-0000-4000-8000-00000000000a"
	uuidB    = "0b0e8e52-0000-4000-8000-00000000000b"
	uuidOff  = "0b0e8e52-0000-4000-8000-0000000000cc"
	uuidOld  = "0b0e8e52-0000-4000-8000-0000000000dd"
	uuidGone = "0b0e8e52-0000-4000-8000-0000000000ee"
)

func newEnv(t testing.TB, mutate func(*Config)) *env {
	t.Helper()
	now := time.Now()
	daemon, err := pki.GeneratePair("guestlink", now.Add(-time.Hour), now.Add(time.Hour), x509.ExtKeyUsageServerAuth)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, daemon: daemon, agents: map[string]*pki.Pair{}, socks: map[string]string{}}
	certs := fakeCerts{}
	for _, name := range []string{"a", "b", "off"} {
		p, err := pki.GeneratePair(name, now.Add(-time.Hour), now.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		e.agents[name] = p
		certs[name] = p.DER
	}
	old, err := pki.GeneratePair("old", now.Add(-2*time.Hour), now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	e.agents["old"] = old
	certs["old"] = old.DER
	e.insts = &fakeInstances{byID: map[string]*instance.Instance{
		uuidA: {Name: "a", UUID: uuidA, Config: map[string]string{
			"user.foo":                        "bar",
			"user.empty":                      "",
			"user.meta-data":                  "foo: bar\n",
			"cloud-init.user-data":            "#cloud-config\npackages: [curl]\nruncmd: [\"printf '%s\\n' hi\"]\n",
			"cloud-init.ssh-keys.mykey":       "root:ssh-ed25519 AAAA",
			"security.secureboot":             "false",
			"volatile.cloud-init.instance-id": "iid-a",
			"volatile.eth2.hwaddr":            "00:16:3e:12:34:56",
		}, Devices: map[string]map[string]string{
			"eth0": {"type": "nic", "network": "br0"},
			"eth1": {"type": "nic", "network": "br0", "hwaddr": "00:16:3e:aa:bb:cc"},
			"eth2": {"type": "nic", "network": "br0"},
			"root": {"type": "disk", "path": "/", "pool": "default"},
		}},
		uuidB: {Name: "b", UUID: uuidB, Config: map[string]string{
			"user.foo": "b-secret", "volatile.last_state.ready": "true",
			"cloud-init.user-data": "#cloud-config\npackages: [curl]\nruncmd: [\"printf '%s\\n' hi\"]\n",
		}},
		uuidOff: {Name: "off", UUID: uuidOff, Config: map[string]string{"security.devlxd": "false", "user.foo": "x"}},
		uuidOld: {Name: "old", UUID: uuidOld, Config: map[string]string{}},
	}}
	cfg := Config{
		Instances:   e.insts,
		Certs:       certs,
		Certificate: daemon.TLS,
		Location:    "host1",
	}
	if mutate != nil {
		mutate(&cfg)
	}
	e.srv, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	dir := t.TempDir()
	for _, uuid := range []string{uuidA, uuidB, uuidOff, uuidOld, uuidGone} {
		path := filepath.Join(dir, uuid[len(uuid)-2:]+".sock")
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		id := linkhost.Identity{InstanceUUID: uuid, Link: sdk.LinkHybrid}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				if err := e.srv.ServeConn(c, id); err != nil {
					c.Close()
					return
				}
			}
		}()
		e.socks[uuid] = path
	}
	return e
}

// tlsConfig is what an agent presenting client (nil: no certificate) uses:
// it pins the daemon certificate.
func (e *env) tlsConfig(client *pki.Pair) *tls.Config {
	cfg := &tls.Config{
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], e.daemon.DER) {
				return errors.New("daemon certificate mismatch")
			}
			return nil
		},
		MinVersion: tls.VersionTLS13,
	}
	if client != nil {
		cfg.Certificates = []tls.Certificate{client.TLS}
	}
	return cfg
}

// client returns an HTTP client whose connections arrive on the link of
// instance uuid and present client.
func (e *env) client(uuid string, client *pki.Pair) *http.Client {
	path := e.socks[uuid]
	cfg := e.tlsConfig(client)
	tr := &http.Transport{
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", path)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(c, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, err
			}
			return tc, nil
		},
		MaxIdleConnsPerHost: 100,
	}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

type answer struct {
	status int
	ctype  string
	body   string
}

func do(t *testing.T, c *http.Client, method, path, body string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "https://lxd"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}
}

func sync200(meta string) answer {
	return answer{200, "application/json", `{"type":"sync","status":"Success","status_code":200,"operation":"","error_code":0,"error":"","metadata":` + meta + "}\n"}
}

func fail(code int, msg string) answer {
	return answer{code, "application/json", fmt.Sprintf(`{"type":"error","status":"","status_code":0,"operation":"","error_code":%d,"error":%q,"metadata":null}`+"\n", code, msg)}
}
