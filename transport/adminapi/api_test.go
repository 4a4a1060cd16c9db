package adminapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/transport/adminapi"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

// envelope is the response envelope with its metadata kept raw.
type envelope struct {
	Type       string          `json:"type"`
	Status     string          `json:"status"`
	StatusCode int             `json:"status_code"`
	Operation  string          `json:"operation"`
	ErrorCode  int             `json:"error_code"`
	Error      string          `json:"error"`
	Metadata   json.RawMessage `json:"metadata"`
}

// httpClient returns a client speaking to srv's Unix socket.
func httpClient(srv *apitest.Server) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: srv.Dial}}
}

// call sends one request and decodes the envelope.
func call(t *testing.T, srv *apitest.Server, method, path, body string) (int, envelope) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, "http://guestlink"+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient(srv).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatalf("%s %s: answer is not an envelope: %v: %s", method, path, err, raw)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	return resp.StatusCode, env
}

// checkEnvelope checks the envelope's fixed fields for status code.
func checkEnvelope(t *testing.T, code int, env envelope) {
	t.Helper()
	switch {
	case code < 300:
		if env.Type != "sync" || env.Status != "Success" || env.StatusCode != 200 || env.ErrorCode != 0 || env.Error != "" {
			t.Errorf("success envelope = %+v", env)
		}
	default:
		if env.Type != "error" || env.Status != "" || env.StatusCode != 0 || env.ErrorCode != code || string(env.Metadata) != "null" {
			t.Errorf("error envelope for %d = %+v (metadata %s)", code, env, env.Metadata)
		}
	}
}

// mustCall calls and fails unless the answer has the wanted code.
func mustCall(t *testing.T, srv *apitest.Server, method, path, body string, want int) envelope {
	t.Helper()
	code, env := call(t, srv, method, path, body)
	if code != want {
		t.Fatalf("%s %s %s: status %d (%s), want %d", method, path, body, code, env.Error, want)
	}
	checkEnvelope(t, code, env)
	return env
}

func TestErrors(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{BodyLimit: 4096})
	mustCall(t, srv, "POST", "/1.0/instances", `{"name":"web1","backend":"sim"}`, 201)
	mustCall(t, srv, "POST", "/1.0/instances", `{"name":"run1","backend":"sim","start":true}`, 201)

	tests := []struct {
		name         string
		method, path string
		body         string
		code         int
		msg          string
	}{
		{"invalid name", "POST", "/1.0/instances", `{"name":"-bad","backend":"sim"}`, 400,
			`invalid instance name "-bad": must not start with a hyphen: invalid argument`},
		{"name with dot", "GET", "/1.0/instances/a.b", "", 400,
			`invalid instance name "a.b": character '.' at position 1 is not a letter, digit or hyphen: invalid argument`},
		{"missing name", "POST", "/1.0/instances", `{"backend":"sim"}`, 400, "invalid instance name: the name is empty: invalid argument"},
		{"name too long", "GET", "/1.0/instances/" + strings.Repeat("a", 64), "", 400,
			`invalid instance name "` + strings.Repeat("a", 64) + `": longer than 63 characters (64): invalid argument`},
		{"unknown backend", "POST", "/1.0/instances", `{"name":"x1","backend":"vbox"}`, 400,
			`unknown backend "vbox": loaded backends are qemu, sim`},
		{"duplicate", "POST", "/1.0/instances", `{"name":"web1","backend":"sim"}`, 409,
			`creating instance "web1": already exists`},
		{"unknown config key on create", "POST", "/1.0/instances", `{"name":"x1","backend":"sim","config":{"foo":"1"}}`, 400,
			`creating instance "x1": unknown config key "foo": invalid argument`},
		{"device without type", "POST", "/1.0/instances", `{"name":"x1","backend":"sim","devices":{"eth0":{}}}`, 400,
			`invalid device "eth0": type is required`},
		{"malformed JSON", "POST", "/1.0/instances", `{"name":`, 400,
			"invalid request body: unexpected end of JSON input"},
		{"wrong JSON type", "POST", "/1.0/instances", `{"name":5}`, 400,
			"invalid request body: json: cannot unmarshal number into Go struct field InstancesPost.name of type string"},
		{"unknown field", "POST", "/1.0/instances", `{"name":"x1","backend":"sim","cpus":2}`, 400,
			`invalid request body: json: unknown field "cpus"`},
		{"trailing data", "POST", "/1.0/instances", `{"name":"x1","backend":"sim"} {}`, 400,
			"invalid request body: unexpected data after the JSON object"},
		{"empty body", "POST", "/1.0/instances", "", 400,
			"invalid request body: empty, a JSON object is required"},
		{"oversized body", "POST", "/1.0/instances", `{"name":"x1","backend":"sim","config":{"user.big":"` + strings.Repeat("a", 5000) + `"}}`, 413,
			"request body too large: the limit is 4096 bytes"},
		{"unknown instance", "GET", "/1.0/instances/nope", "", 404, `instance "nope": not found`},
		{"unknown instance state", "GET", "/1.0/instances/nope/state", "", 404, `instance "nope": not found`},
		{"unknown instance timeline", "GET", "/1.0/instances/nope/timeline", "", 404, `reading timeline of instance "nope": not found`},
		{"start running", "PUT", "/1.0/instances/run1/state", `{"action":"start"}`, 409,
			`starting instance "run1": already running: conflict`},
		{"stop stopped", "PUT", "/1.0/instances/web1/state", `{"action":"stop"}`, 409,
			`stopping instance "web1": not running: conflict`},
		{"stateful stop", "PUT", "/1.0/instances/run1/state", `{"action":"stop","stateful":true}`, 501,
			`stopping instance "run1" statefully: not supported`},
		{"stateless stop", "PUT", "/1.0/instances/run1/state", `{"action":"stop","stateless":true}`, 400,
			`stateless applies to start only, not "stop"`},
		{"stateless start unsupported", "PUT", "/1.0/instances/web1/state", `{"action":"start","stateless":true}`, 501,
			`starting instance "web1" without its saved state: not supported`},
		{"invalid action", "PUT", "/1.0/instances/web1/state", `{"action":"freeze"}`, 400,
			`invalid action "freeze": must be start, stop or restart`},
		{"missing action", "PUT", "/1.0/instances/web1/state", `{}`, 400, "action is required: start, stop or restart"},
		{"negative timeout", "PUT", "/1.0/instances/run1/state", `{"action":"stop","timeout":-1}`, 400,
			"invalid timeout -1: must be between 0 and 86400 seconds"},
		{"delete running", "DELETE", "/1.0/instances/run1", "", 409,
			`deleting instance "run1": running, stop it first or force: conflict`},
		{"bad force", "DELETE", "/1.0/instances/run1?force=maybe", "", 400, `invalid force "maybe": must be true or false`},
		{"unknown config key", "PATCH", "/1.0/instances/web1", `{"config":{"nope":"1"}}`, 400,
			`updating instance "web1": unknown config key "nope": invalid argument`},
		{"empty patch", "PATCH", "/1.0/instances/web1", `{}`, 400, "nothing to change: give config keys to set or unset keys"},
		{"set and unset", "PATCH", "/1.0/instances/web1", `{"config":{"user.a":"1"},"unset":["user.a"]}`, 400,
			`config key "user.a" is both set and unset`},
		{"patch unknown instance", "PATCH", "/1.0/instances/nope", `{"config":{"user.a":"1"}}`, 404,
			`updating instance "nope": not found`},
		{"bad limit", "GET", "/1.0/instances/web1/timeline?limit=abc", "", 400,
			`invalid limit "abc": must be an integer between 1 and 10000`},
		{"zero limit", "GET", "/1.0/instances/web1/timeline?limit=0", "", 400,
			`invalid limit "0": must be an integer between 1 and 10000`},
		{"bad status filter", "GET", "/1.0/instances?status=Sleeping", "", 400,
			`listing instances: parsing status "Sleeping": unknown status name: invalid argument`},
		{"bad agent filter", "GET", "/1.0/instances?agent=dead", "", 400,
			`invalid agent filter "dead": must be none, started, connected, stopped or lost`},
		{"bad since", "GET", "/1.0/events?since=-3", "", 400, `invalid since "-3": must be a non-negative event id`},
		{"bad since text", "GET", "/1.0/events?since=abc", "", 400, `invalid since "abc": must be a non-negative event id`},
		{"bad event type", "GET", "/1.0/events?type=lifecycle,agent", "", 400, `invalid event type "agent": must be lifecycle or logging`},
		{"bad event instance", "GET", "/1.0/events?instance=a_b", "", 400, `invalid instance filter: invalid instance name "a_b": character '_' at position 1 is not a letter, digit or hyphen: invalid argument`},
		{"events without upgrade", "GET", "/1.0/events", "", 400, "GET /1.0/events is a websocket: send an upgrade request"},
		{"unknown endpoint", "GET", "/1.0/volumes", "", 404, "no such endpoint: GET /1.0/volumes"},
		{"wrong method", "PUT", "/1.0/backends", "{}", 405, "method PUT not allowed on /1.0/backends"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, env := call(t, srv, tt.method, tt.path, tt.body)
			if code != tt.code || env.Error != tt.msg {
				t.Fatalf("got %d %q\nwant %d %q", code, env.Error, tt.code, tt.msg)
			}
			checkEnvelope(t, code, env)
		})
	}
	// Nothing above may have changed the instances.
	var list []api.Instance
	if err := json.Unmarshal(mustCall(t, srv, "GET", "/1.0/instances?recursion=1", "", 200).Metadata, &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "run1" || list[1].Name != "web1" || list[0].Status != "Running" {
		t.Fatalf("instances after bad requests: %+v", list)
	}
}

func TestCrossSiteRefused(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{})
	for _, ct := range []string{"text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"} {
		t.Run(ct, func(t *testing.T) {
			req, _ := http.NewRequest("POST", "http://guestlink/1.0/instances", strings.NewReader(`{"name":"x1","backend":"sim"}`))
			req.Header.Set("Content-Type", ct)
			resp, err := httpClient(srv).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var env envelope
			if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("content type %q is not accepted: send application/json", strings.TrimSpace(strings.Split(ct, ";")[0]))
			if resp.StatusCode != 415 || env.Error != want {
				t.Fatalf("got %d %q, want 415 %q", resp.StatusCode, env.Error, want)
			}
		})
	}
	// A page can POST a Blob with an empty type in no-cors mode: the browser
	// then sends no Content-Type at all, still without a preflight.
	t.Run("no content type", func(t *testing.T) {
		req, _ := http.NewRequest("POST", "http://guestlink/1.0/instances", strings.NewReader(`{"name":"x1","backend":"sim"}`))
		resp, err := httpClient(srv).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var env envelope
		if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
			t.Fatal(err)
		}
		want := `content type "" is not accepted: send application/json`
		if resp.StatusCode != 415 || env.Error != want {
			t.Fatalf("got %d %q, want 415 %q", resp.StatusCode, env.Error, want)
		}
	})
	t.Run("websocket origin", func(t *testing.T) {
		req, _ := http.NewRequest("GET", "http://guestlink/1.0/events", nil)
		for k, v := range map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
			"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Origin": "http://evil.example"} {
			req.Header.Set(k, v)
		}
		resp, err := httpClient(srv).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var env envelope
		if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 403 || env.Error != `cross-origin websocket from "http://evil.example" refused` {
			t.Fatalf("got %d %q", resp.StatusCode, env.Error)
		}
	})
	if n := srv.Subscriptions(); n != 0 {
		t.Fatalf("%d subscriptions made for refused websockets", n)
	}
}

func TestListenUnix(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{})
	fi, err := os.Stat(srv.Socket)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != adminapi.SocketMode {
		t.Errorf("socket mode %v, want %v", fi.Mode().Perm(), adminapi.SocketMode)
	}

	t.Run("live daemon", func(t *testing.T) {
		if ln, err := adminapi.ListenUnix(srv.Socket); err == nil {
			ln.Close()
			t.Fatal("listening on a socket a daemon answers on succeeded")
		} else if !strings.Contains(err.Error(), "another daemon answers on this socket") {
			t.Fatalf("error = %v", err)
		}
	})

	t.Run("stale socket", func(t *testing.T) {
		path := t.TempDir() + "/stale.sock"
		ln, err := adminapi.ListenUnix(path)
		if err != nil {
			t.Fatal(err)
		}
		// Leave the file behind as a crashed daemon would.
		ul := ln.(interface{ SetUnlinkOnClose(bool) })
		ul.SetUnlinkOnClose(false)
		ln.Close()
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("stale socket missing: %v", err)
		}
		ln, err = adminapi.ListenUnix(path)
		if err != nil {
			t.Fatalf("listening over a stale socket: %v", err)
		}
		ln.Close()
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Fatalf("socket left after Close: %v", err)
		}
	})

	t.Run("not a socket", func(t *testing.T) {
		path := t.TempDir() + "/file"
		if err := os.WriteFile(path, []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := adminapi.ListenUnix(path); err == nil || !strings.Contains(err.Error(), "exists and is not a socket") {
			t.Fatalf("error = %v", err)
		}
		if b, _ := os.ReadFile(path); string(b) != "keep" {
			t.Fatal("file was touched")
		}
	})
}

// TestRebindingRefused checks that on a loopback TCP listener only requests
// naming localhost or an IP address are served: a page whose DNS name was
// rebound to 127.0.0.1 is same-origin for the browser and must not reach the
// API.
func TestRebindingRefused(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.API.Serve(ln) }()
	port := ln.Addr().(*net.TCPAddr).Port
	tests := []struct {
		host string
		code int
	}{
		{fmt.Sprintf("127.0.0.1:%d", port), 401},
		{fmt.Sprintf("localhost:%d", port), 401},
		{fmt.Sprintf("[::1]:%d", port), 401},
		{fmt.Sprintf("evil.example:%d", port), 403},
		{"evil.example", 403},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/1.0/instances", port), nil)
			req.Host = tt.host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var env envelope
			if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.code {
				t.Fatalf("Host %q: got %d %q, want %d", tt.host, resp.StatusCode, env.Error, tt.code)
			}
			checkEnvelope(t, resp.StatusCode, env)
		})
	}
}
