package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testcert"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/internal/testenv"
)

// Config values the guest must see byte for byte.
const (
	userX = "#cloud-config\nruncmd:\n  - printf '%s\\n' \"100%d\" > /tmp/out\n\n\ttabbed %% line\nno trailing newline"
	// userMetaData is appended verbatim to meta-data.
	userMetaData  = "vendor: acme\nregion: \"eu %s\"\n"
	cloudUserData = "#cloud-config\nhostname: devlxd-host\n"
	sshKey        = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample"
	// sshUsers is the cloud-config LXD merges cloud-init.ssh-keys.root into
	// the seed data with (yaml.v2's rendering, the added keys tagged).
	sshUsers = "users:\n- name: root\n  ssh-authorized-keys:\n  - " + sshKey + " #lxd:cloud-init.ssh-keys\n" +
		"  ssh_authorized_keys:\n  - " + sshKey + " #lxd:cloud-init.ssh-keys\n"
	// mergedUserData and mergedVendorData are what the guest reads.
	mergedUserData   = cloudUserData + sshUsers
	mergedVendorData = "#cloud-config\n" + sshUsers
)

var macRE = regexp.MustCompile(`^([0-9a-f]{2}:){5}[0-9a-f]{2}$`)

// TestDevlxd checks the guest API through the real agent's socket: with
// curl byte for byte, and with cloud-init's own LXD datasource.
func TestDevlxd(t *testing.T) {
	t.Parallel()
	d := newDaemon(t) // first: it may wait for the build
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const name = "devlxd1"
	g := d.launch(ctx, name, map[string]string{
		"user.x":                   userX,
		"user.meta-data":           userMetaData,
		"cloud-init.user-data":     cloudUserData,
		"cloud-init.ssh-keys.root": "root:" + sshKey,
	}, map[string]map[string]string{
		"eth0": {"type": "nic", "network": "br0"},
		"eth1": {"type": "nic", "network": "br1", "hwaddr": "00:16:3e:aa:bb:cc"},
		"root": {"type": "disk", "path": "/", "pool": "default"},
	})
	inst, err := d.client.Instance(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	wantMeta := "instance-id: " + inst.UUID + "\nlocal-hostname: " + name + "\n" + userMetaData

	t.Run("curl", func(t *testing.T) {
		const (
			jsonType = "application/json"
			rawType  = "application/octet-stream"
			textType = "text/plain; charset=utf-8"
		)
		for _, tc := range []struct {
			name, method, path, body string
			status                   int
			ctype                    string
			raw                      string // exact body, when not JSON
			json                     any    // expected JSON value, when JSON
		}{
			{name: "root", method: "GET", path: "/", status: 200, ctype: jsonType, json: []any{"/1.0"}},
			{name: "info", method: "GET", path: "/1.0", status: 200, ctype: jsonType, json: map[string]any{
				"api_version": "1.0", "state": "Started", "instance_type": "container", "location": host, // sim guests are processes
				"auth": "untrusted", "supported_storage_drivers": []any{},
			}},
			{name: "config list", method: "GET", path: "/1.0/config", status: 200, ctype: jsonType, json: []any{
				"/1.0/config/cloud-init.user-data", "/1.0/config/cloud-init.vendor-data", "/1.0/config/user.meta-data",
				"/1.0/config/user.vendor-data", "/1.0/config/user.x",
			}},
			{name: "user key byte-exact", method: "GET", path: "/1.0/config/user.x", status: 200, ctype: rawType, raw: userX},
			{name: "cloud-init key", method: "GET", path: "/1.0/config/cloud-init.user-data", status: 200, ctype: rawType, raw: mergedUserData},
			{name: "vendor-data with ssh keys", method: "GET", path: "/1.0/config/cloud-init.vendor-data", status: 200, ctype: rawType, raw: mergedVendorData},
			{name: "non-user key set", method: "GET", path: "/1.0/config/volatile.uuid", status: 403, ctype: textType, raw: "Forbidden\n"},
			{name: "non-user key unset", method: "GET", path: "/1.0/config/security.devlxd", status: 403, ctype: textType, raw: "Forbidden\n"},
			{name: "unset user key", method: "GET", path: "/1.0/config/user.missing", status: 404, ctype: textType, raw: "Not Found\n"},
			{name: "meta-data", method: "GET", path: "/1.0/meta-data", status: 200, ctype: rawType, raw: wantMeta},
			{name: "state lowercase", method: "PATCH", path: "/1.0", body: `{"state":"ready"}`, status: 400, ctype: textType, raw: "Invalid state \"ready\"\n"},
			{name: "state unknown", method: "PATCH", path: "/1.0", body: `{"state":"Running"}`, status: 400, ctype: textType, raw: "Invalid state \"Running\"\n"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				a := curlDevlxd(ctx, t, g.socket, tc.method, tc.path, tc.body)
				if a.status != tc.status || a.contentType != tc.ctype {
					t.Errorf("%s %s: %d %q, want %d %q (body %q)", tc.method, tc.path, a.status, a.contentType, tc.status, tc.ctype, a.body)
				}
				if tc.json != nil {
					var got any
					if err := json.Unmarshal(a.body, &got); err != nil {
						t.Fatalf("%s %s: body %q is not JSON: %v", tc.method, tc.path, a.body, err)
					}
					if s, ok := got.([]any); ok {
						slices.SortFunc(s, func(a, b any) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
					}
					if !reflect.DeepEqual(got, tc.json) {
						t.Errorf("%s %s: %s, want %v", tc.method, tc.path, a.body, tc.json)
					}
					return
				}
				if string(a.body) != tc.raw {
					t.Errorf("%s %s body:\n got %q\nwant %q", tc.method, tc.path, a.body, tc.raw)
				}
			})
		}
		t.Run("malformed PATCH", func(t *testing.T) {
			a := curlDevlxd(ctx, t, g.socket, "PATCH", "/1.0", `{"state":`)
			if a.status != 400 || !strings.HasPrefix(string(a.body), "Invalid request body: ") || !strings.HasSuffix(string(a.body), "\n") {
				t.Errorf("malformed PATCH: %d %q, want 400 \"Invalid request body: ...\\n\"", a.status, a.body)
			}
		})
		t.Run("PATCH over the daemon's body limit", func(t *testing.T) {
			// Under the agent's limit (1 MiB), over the daemon's (64
			// KiB): the guest gets the daemon's 413, not a 502/500 of
			// the agent's unfinished write.
			f := filepath.Join(t.TempDir(), "big.json")
			if err := os.WriteFile(f, []byte(`{"state":"Ready","message":"`+strings.Repeat("x", 300<<10)+`"}`), 0o600); err != nil {
				t.Fatal(err)
			}
			if a := curlDevlxd(ctx, t, g.socket, "PATCH", "/1.0", "@"+f); a.status != http.StatusRequestEntityTooLarge {
				t.Errorf("PATCH of 300 KiB: %d %q, want 413", a.status, a.body)
			}
		})
		t.Run("devices", func(t *testing.T) {
			a := curlDevlxd(ctx, t, g.socket, "GET", "/1.0/devices", "")
			var devs map[string]map[string]string
			if err := json.Unmarshal(a.body, &devs); err != nil || a.status != 200 {
				t.Fatalf("GET /1.0/devices: %d %q: %v", a.status, a.body, err)
			}
			for n, dev := range devs {
				if dev["type"] == "" {
					t.Errorf("device %s has no type: %v", n, dev)
				}
			}
			if mac := devs["eth0"]["hwaddr"]; !macRE.MatchString(mac) {
				t.Errorf("eth0 (no hwaddr configured) got hwaddr %q, want a generated MAC", mac)
			}
			if mac := devs["eth1"]["hwaddr"]; mac != "00:16:3e:aa:bb:cc" {
				t.Errorf("eth1 hwaddr %q, want the configured one", mac)
			}
			if !reflect.DeepEqual(devs["root"], map[string]string{"type": "disk", "path": "/", "pool": "default"}) {
				t.Errorf("root device %v", devs["root"])
			}
			again := curlDevlxd(ctx, t, g.socket, "GET", "/1.0/devices", "")
			if string(again.body) != string(a.body) {
				t.Errorf("GET /1.0/devices is not stable: %q then %q", a.body, again.body)
			}
		})
		t.Run("nothing changed", func(t *testing.T) {
			inst, err := d.client.Instance(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if inst.Ready() || inst.StatusCode != int(status.Running) {
				t.Errorf("rejected PATCHes changed the instance: %s, ready %v", inst.Status, inst.Ready())
			}
		})
		t.Run("concurrent keep-alive", func(t *testing.T) {
			hc := unixHTTPClient(g.socket)
			defer hc.CloseIdleConnections()
			var wg sync.WaitGroup
			errs := make(chan error, 40)
			for i := 0; i < 20; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := 0; j < 2; j++ { // the second request reuses the connection
						req, _ := http.NewRequestWithContext(ctx, "GET", "http://lxd/1.0/config/user.x", nil)
						resp, err := hc.Do(req)
						if err != nil {
							errs <- err
							return
						}
						body, err := readAll(resp)
						if err != nil || resp.StatusCode != 200 || body != userX {
							errs <- fmt.Errorf("GET user.x: %d %q %v", resp.StatusCode, body, err)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	})

	t.Run("cloud-init", func(t *testing.T) {
		py := cloudInitPython(t)
		out, err := exec.CommandContext(ctx, py, "-c", cloudInitScript, g.socket).CombinedOutput()
		if err != nil {
			t.Fatalf("cloud-init's DataSourceLXD.read_metadata: %v\n%s", err, out)
		}
		var md map[string]any
		if err := json.Unmarshal(out, &md); err != nil {
			t.Fatalf("decoding read_metadata output %q: %v", out, err)
		}
		devices := md["devices"]
		delete(md, "devices")
		want := map[string]any{
			"_metadata_api_version": "1.0",
			"meta-data":             wantMeta,
			"config": map[string]any{
				"user.x":                 userX,
				"user.meta-data":         userMetaData,
				"cloud-init.user-data":   mergedUserData,
				"cloud-init.vendor-data": mergedVendorData,
				"user.vendor-data":       mergedVendorData,
			},
			// cloud-init.ssh-keys.* reach cloud-init merged into its seed data.
			"user-data":   mergedUserData,
			"vendor-data": mergedVendorData,
		}
		if !reflect.DeepEqual(md, want) {
			t.Errorf("read_metadata:\n got %#v\nwant %#v", md, want)
		}
		devs, _ := devices.(map[string]any)
		eth0, _ := devs["eth0"].(map[string]any)
		if mac, _ := eth0["hwaddr"].(string); !macRE.MatchString(mac) || len(devs) != 3 {
			t.Errorf("read_metadata devices %v: want 3 devices, eth0 with a generated MAC", devices)
		}
	})
}

// cloudInitScript reads the metadata with cloud-init's LXD datasource,
// pointed at the socket given as the first argument (the module reads its
// LXD_SOCKET_PATH constant when it connects).
const cloudInitScript = `
import json, sys
import cloudinit.sources.DataSourceLXD as lxd
lxd.LXD_SOCKET_PATH = sys.argv[1]
print(json.dumps(lxd.read_metadata()))
`

// cloudInitPython returns a python3 that can import cloudinit (Debian's
// cloud-init package installs it for /usr/bin/python3).
func cloudInitPython(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(py, "-c", "import cloudinit.sources.DataSourceLXD").Run() == nil {
			return py
		}
	}
	testenv.Requires(t, "cloud-init", "not installed (Debian package cloud-init; scripts/install-deps.sh installs it)")
	return ""
}

// unixHTTPClient returns an HTTP client whose every request goes to the
// Unix socket path.
func unixHTTPClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConnsPerHost: 32,
	}}
}

func readAll(resp *http.Response) (string, error) {
	defer resp.Body.Close()
	var b strings.Builder
	_, err := bufio.NewReader(resp.Body).WriteTo(&b)
	return b.String(), err
}

// TestDevlxdToggle turns security.devlxd off and on on a running guest: the
// socket goes and comes back, and the daemon refuses devlxd calls over the
// link meanwhile.
func TestDevlxdToggle(t *testing.T) {
	t.Parallel()
	d := newDaemon(t) // first: it may wait for the build
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const name = "toggle1"
	g := d.launch(ctx, name, map[string]string{"user.k": "v"}, nil)
	link := newLinkClient(t, g, g)
	if code, env, err := link.get(ctx, "/1.0"); err != nil || code != 200 || env.Type != "sync" {
		t.Fatalf("GET /1.0 over the link with devlxd on: %d %+v %v", code, env, err)
	}

	if _, err := d.client.UpdateConfig(ctx, name, map[string]string{"security.devlxd": "false"}, nil); err != nil {
		t.Fatal(err)
	}
	waitGone(ctx, t, "devlxd socket removed", func() bool {
		_, err := os.Stat(g.socket)
		return errors.Is(err, os.ErrNotExist)
	})
	for _, path := range []string{"/1.0", "/1.0/config/user.k", "/1.0/meta-data"} {
		code, env, err := link.get(ctx, path)
		if err != nil || code != 403 || env.ErrorCode != 403 || env.Error != "Forbidden" {
			t.Errorf("GET %s over the link with devlxd off: %d %+v %v; want 403 Forbidden", path, code, env, err)
		}
	}
	if inst, err := d.client.Instance(ctx, name); err != nil || inst.Agent.State != api.AgentConnected {
		t.Errorf("agent after disabling devlxd: %+v %v; want connected", inst, err)
	}

	if _, err := d.client.UpdateConfig(ctx, name, map[string]string{"security.devlxd": "true"}, nil); err != nil {
		t.Fatal(err)
	}
	waitGone(ctx, t, "devlxd socket back", func() bool {
		_, err := os.Stat(g.socket)
		return err == nil
	})
	if a := curlDevlxd(ctx, t, g.socket, "GET", "/1.0/config/user.k", ""); a.status != 200 || string(a.body) != "v" {
		t.Errorf("GET user.k after re-enabling devlxd: %d %q", a.status, a.body)
	}
}

// TestConfigPush sets a user key with the CLI on a running guest and reads
// the config event from the guest's raw /1.0/events stream.
func TestConfigPush(t *testing.T) {
	t.Parallel()
	d := newDaemon(t) // first: it may wait for the build
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const name = "push1"
	g := d.launch(ctx, name, nil, nil)

	req, _ := http.NewRequestWithContext(ctx, "GET", "http://lxd/1.0/events", nil)
	resp, err := unixHTTPClient(g.socket).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /1.0/events: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func() map[string]any {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the events stream ended")
			}
			var ev map[string]any
			if err := json.Unmarshal([]byte(l), &ev); err != nil {
				t.Fatalf("event line %q: %v", l, err)
			}
			if ts, _ := ev["timestamp"].(string); ts == "" {
				t.Errorf("event without timestamp: %s", l)
			} else if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
				t.Errorf("event timestamp %q: %v", ts, err)
			}
			return ev
		case <-time.After(opTimeout):
			t.Fatalf("no event within %v", opTimeout)
		}
		return nil
	}
	check := func(ev map[string]any, key, old, val string) {
		t.Helper()
		want := map[string]any{"key": key, "old_value": old, "value": val}
		if ev["type"] != "config" || !reflect.DeepEqual(ev["metadata"], want) {
			t.Errorf("event %v, want type config with %v", ev, want)
		}
	}

	d.cli(ctx, "config", "set", name, "user.foo=bar")
	check(next(), "user.foo", "", "bar")
	// Keys outside user.* are not pushed; the next event is user.foo's.
	d.cli(ctx, "config", "set", name, "cloud-init.user-data=#cloud-config")
	d.cli(ctx, "config", "set", name, "user.foo", "baz")
	check(next(), "user.foo", "bar", "baz")
}

// TestAgentCertIsolation presents one guest's agent certificate on another
// guest's link: the daemon answers 401.
func TestAgentCertIsolation(t *testing.T) {
	t.Parallel()
	d := newDaemon(t) // first: it may wait for the build
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	a := d.launch(ctx, "iso-a", nil, nil)
	b := d.launch(ctx, "iso-b", nil, nil)

	for _, tc := range []struct {
		name       string
		link, cert *guest
		want       int
	}{
		{"A on A", a, a, 200},
		{"B on B", b, b, 200},
		{"A on B", b, a, 401},
		{"B on A", a, b, 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, env, err := newLinkClient(t, tc.link, tc.cert).get(ctx, "/1.0/meta-data")
			if err != nil {
				t.Fatalf("GET /1.0/meta-data: %v", err)
			}
			if code != tc.want {
				t.Fatalf("GET /1.0/meta-data: %d %+v, want %d", code, env, tc.want)
			}
			if tc.want == 401 && (env.ErrorCode != 401 || env.Error != "Unauthorized") {
				t.Errorf("error envelope %+v, want 401 Unauthorized", env)
			}
			if tc.want == 200 {
				var meta string
				_ = json.Unmarshal(env.Metadata, &meta)
				if !strings.Contains(meta, "local-hostname: "+tc.link.name+"\n") {
					t.Errorf("meta-data %q does not name %s", meta, tc.link.name)
				}
			}
		})
	}
	t.Run("unknown certificate", func(t *testing.T) {
		lc := newLinkClient(t, a, a)
		lc.tls.Certificates = []tls.Certificate{selfSigned(t)}
		code, env, err := lc.get(ctx, "/1.0")
		if err == nil && code != 401 {
			t.Errorf("GET /1.0 with a stranger's certificate: %d %+v, want 401", code, env)
		}
	})
}

// selfSigned returns a fresh self-signed client certificate.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	return testcert.NewWith(t, "stranger", testcert.Options{Ed25519: true, Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}).TLS()
}
