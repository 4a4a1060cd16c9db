package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/core/status"
)

// TestBadInput sends bad requests to the real daemon's admin API: each gets
// its precise status and message, and nothing changes.
func TestBadInput(t *testing.T) {
	t.Parallel()
	d := newDaemon(t) // first: it may wait for the build
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const name = "bad-ok"
	d.launch(ctx, name, map[string]string{"user.keep": "1"}, nil)
	before := snapshot(ctx, t, d)

	huge := `{"name":"huge","backend":"sim","config":{"user.a":"` + strings.Repeat("a", 2<<20) + `"}}`
	for _, tc := range []struct {
		name, method, path, body string
		code                     int
		msg                      string
	}{
		{"name with underscore", "POST", "/1.0/instances", `{"name":"Bad_Name","backend":"sim"}`, 400,
			`invalid instance name "Bad_Name": character '_' at position 3 is not a letter, digit or hyphen: invalid argument`},
		{"empty name", "POST", "/1.0/instances", `{"name":"","backend":"sim"}`, 400,
			`invalid instance name: the name is empty: invalid argument`},
		{"leading hyphen", "POST", "/1.0/instances", `{"name":"-a","backend":"sim"}`, 400,
			`invalid instance name "-a": must not start with a hyphen: invalid argument`},
		{"name too long", "POST", "/1.0/instances", `{"name":"` + strings.Repeat("a", 64) + `","backend":"sim"}`, 400,
			`invalid instance name "` + strings.Repeat("a", 64) + `": longer than 63 characters (64): invalid argument`},
		{"name with dot", "POST", "/1.0/instances", `{"name":"a.b","backend":"sim"}`, 400,
			`invalid instance name "a.b": character '.' at position 1 is not a letter, digit or hyphen: invalid argument`},
		{"name in path", "GET", "/1.0/instances/Bad_Name", "", 400,
			`invalid instance name "Bad_Name": character '_' at position 3 is not a letter, digit or hyphen: invalid argument`},
		{"unknown backend", "POST", "/1.0/instances", `{"name":"x1","backend":"nope"}`, 400,
			`unknown backend "nope": loaded backends are fleet, sim`},
		{"duplicate", "POST", "/1.0/instances", `{"name":"bad-ok","backend":"sim"}`, 409,
			`creating instance "bad-ok": an instance with this name exists: already exists`},
		{"unknown instance", "GET", "/1.0/instances/nosuch", "", 404, `instance "nosuch": not found`},
		{"start unknown", "PUT", "/1.0/instances/nosuch/state", `{"action":"start"}`, 404,
			`starting instance "nosuch": instance "nosuch": not found`},
		{"delete unknown", "DELETE", "/1.0/instances/nosuch", "", 404,
			`deleting instance "nosuch": instance "nosuch": not found`},
		{"start running", "PUT", "/1.0/instances/bad-ok/state", `{"action":"start"}`, 409,
			`starting instance "bad-ok": already running: conflict`},
		{"delete running", "DELETE", "/1.0/instances/bad-ok", "", 409,
			`deleting instance "bad-ok": instance is running (stop it first or force): conflict`},
		{"unknown config key", "PATCH", "/1.0/instances/bad-ok", `{"config":{"foo.bar":"x"}}`, 400,
			`updating instance "bad-ok": unknown configuration key "foo.bar": invalid argument`},
		{"bad volatile value", "PATCH", "/1.0/instances/bad-ok", `{"config":{"volatile.uuid":"x"}}`, 400,
			`updating instance "bad-ok": invalid value for "volatile.uuid": "x" is not a lowercase UUID: invalid argument`},
		{"invalid action", "PUT", "/1.0/instances/bad-ok/state", `{"action":"jump"}`, 400,
			`invalid action "jump": must be start, stop or restart`},
		{"malformed JSON", "POST", "/1.0/instances", `{"name":`, 400, `invalid request body: unexpected end of JSON input`},
		{"unknown field", "POST", "/1.0/instances", `{"name":"x4","backend":"sim","bogus":1}`, 400,
			`invalid request body: json: unknown field "bogus"`},
		{"oversized body", "POST", "/1.0/instances", huge, 413, `request body too large: the limit is 1048576 bytes`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, msg := adminDo(ctx, t, d, tc.method, tc.path, tc.body)
			if code != tc.code || msg != tc.msg {
				t.Errorf("%s %s: %d %q\nwant %d %q", tc.method, tc.path, code, msg, tc.code, tc.msg)
			}
		})
	}
	t.Run("unknown sim key", func(t *testing.T) {
		code, msg := adminDo(ctx, t, d, "POST", "/1.0/instances", `{"name":"x3","backend":"sim","config":{"sim.bogus":"1"}}`)
		const want = `unknown config key "sim.bogus" (known: sim.agent, sim.command, sim.layout, sim.link, sim.ring_size): invalid argument`
		if code != 400 || !strings.HasPrefix(msg, `creating instance "x3": `) || !strings.HasSuffix(msg, want) {
			t.Errorf("POST with sim.bogus: %d %q, want 400 naming x3 and ending %q", code, msg, want)
		}
	})

	if after := snapshot(ctx, t, d); !reflect.DeepEqual(after, before) {
		t.Errorf("bad requests changed the instances:\nbefore %v\nafter  %v", before, after)
	}
	if _, err := d.client.ServerInfo(ctx); err != nil || !d.running() {
		t.Fatalf("daemon after bad input: %v", err)
	}
}

// snapshot returns what bad requests must not change: each instance's
// name, status and user/security/volatile keys.
func snapshot(ctx context.Context, t *testing.T, d *daemonProc) map[string]string {
	t.Helper()
	list, err := d.client.Instances(ctx, client.InstanceFilter{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, inst := range list {
		cfg := map[string]string{}
		for k, v := range inst.Config {
			if !strings.HasPrefix(k, "volatile.last_state") { // the agent may touch nothing else
				cfg[k] = v
			}
		}
		data, _ := json.Marshal(cfg)
		out[inst.Name] = status.Code(inst.StatusCode).String() + " " + string(data)
	}
	return out
}

// adminDo sends a raw JSON request to the admin socket and returns the
// status and the envelope's error message.
func adminDo(ctx context.Context, t *testing.T, d *daemonProc, method, path, body string) (int, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://unix"+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	// A raw connection: the daemon answers an oversized body before reading
	// it and closes, which net/http's client reports as a broken pipe
	// instead of the answer. The body is written concurrently; the answer
	// stays readable on a Unix socket after the daemon's close.
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "unix", filepath.Join(d.stateDir, "guestlink.sock"))
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	go func() { _ = req.Write(conn) }()
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	defer resp.Body.Close()
	var env envelope
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &env); err != nil {
		t.Fatalf("%s %s: %d answer %q is not an envelope: %v", method, path, resp.StatusCode, data, err)
	}
	if env.ErrorCode != 0 && env.ErrorCode != resp.StatusCode {
		t.Errorf("%s %s: HTTP %d but error_code %d", method, path, resp.StatusCode, env.ErrorCode)
	}
	return resp.StatusCode, env.Error
}
