package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"syscall"
	"testing"
	"time"

	gojson "github.com/goccy/go-json"
	"github.com/google/go-cmp/cmp"

	"github.com/guestlink/guestlink/api"
)

// fakeResponse returns an answer with the given status and body.
func fakeResponse(code int, body []byte) *http.Response {
	return &http.Response{StatusCode: code, ContentLength: int64(len(body)), Body: io.NopCloser(bytes.NewReader(body))}
}

// sampleInstances returns n instances shaped like the daemon's list.
func sampleInstances(n int) []api.Instance {
	now := time.Date(2026, 11, 22, 1, 2, 3, 456789, time.UTC)
	list := make([]api.Instance, n)
	for i := range list {
		started := now.Add(time.Duration(i) * time.Second)
		list[i] = api.Instance{
			Name: fmt.Sprintf("vm%05d", i), UUID: fmt.Sprintf("%08x-0000-4000-8000-000000000000", i),
			Backend: "sim", Status: "Stopped", StatusCode: 102,
			Config:    map[string]string{"user.role": "web <&>", "limits.cpu": "2", "limits.memory": "1GiB", "volatile.uuid": "x"},
			Devices:   map[string]map[string]string{"root": {"type": "disk"}},
			CreatedAt: now, StartedAt: &started,
			Agent: api.AgentInfo{State: api.AgentNone},
		}
	}
	return list
}

// runningInstances returns n instances shaped like the daemon's running
// fleet guests: agent connected, details, three conditions, every fourth
// Ready.
func runningInstances(n int) []api.Instance {
	base := time.Date(2026, 11, 27, 1, 28, 57, 333776222, time.UTC)
	list := make([]api.Instance, n)
	for i := range list {
		uuid := fmt.Sprintf("%08x-f31d-4349-8cb2-d85ea7ac8899", i)
		dir := fmt.Sprintf("/tmp/glb3902819647/plugins/fleet/guests/f-%d-%08x", i, i*7919)
		created := base.Add(time.Duration(i) * 13 * time.Millisecond)
		started, since := created.Add(61216797), created.Add(89890555)
		beat := since.Add(5*time.Second + 12345)
		inst := api.Instance{
			Name: fmt.Sprintf("f-%d", i), UUID: uuid, Backend: "fleet", Status: "Running", StatusCode: 103,
			Config:  map[string]string{"volatile.last_state.ready": "false", "volatile.uuid": uuid},
			Devices: map[string]map[string]string{}, Boot: 1, CreatedAt: created, StartedAt: &started, Link: "hybrid",
			Agent:        api.AgentInfo{State: api.AgentConnected, LastHeartbeat: &beat, Since: &since},
			DevlxdSocket: dir + "/rootfs/dev/lxd/sock",
			Details: map[string]string{"boot": "1", "devlxd_socket": dir + "/rootfs/dev/lxd/sock", "guest_dir": dir,
				"layout": "current", "ring_size": "16"},
			Conditions: []api.Condition{
				{Type: "AgentConnected", Status: "True", Reason: "AgentConnected", Message: "the daemon holds a link to the agent", LastTransitionTime: since},
				{Type: "Ready", Status: "False", Reason: "NotDeclared", Message: "the guest has not declared Ready", LastTransitionTime: created},
				{Type: "Degraded", Status: "False", Reason: "NotDegraded", LastTransitionTime: created},
			},
			Location: "none",
		}
		if i%4 == 0 {
			at := beat.Add(time.Second)
			inst.Status, inst.StatusCode, inst.ReadyAt = "Ready", 113, &at
			inst.Config["volatile.last_state.ready"] = "true"
			inst.Conditions[1] = api.Condition{Type: "Ready", Status: "True", Reason: "GuestDeclaredReady", LastTransitionTime: at}
		}
		list[i] = inst
	}
	return list
}

func TestDecodeResponse(t *testing.T) {
	list := sampleInstances(3)
	body, err := json.Marshal(api.Sync(list))
	if err != nil {
		t.Fatal(err)
	}
	errBody, _ := json.Marshal(api.Error(http.StatusNotFound, `instance "x" not found`))
	tests := []struct {
		name     string
		code     int
		body     []byte
		want     []api.Instance
		wantCode int    // StatusError code, 0 for success
		wantMsg  string // StatusError message
		wantErr  bool   // another error
	}{
		{name: "sync list", code: 200, body: body, want: list},
		{name: "null metadata", code: 200, body: []byte(`{"type":"sync","metadata":null}`)},
		{name: "error envelope", code: 404, body: errBody, wantCode: 404, wantMsg: `instance "x" not found`},
		{name: "error envelope with 200", code: 200, body: []byte(`{"type":"error","error_code":409,"error":"busy","metadata":{"a":1}}`), wantCode: 409, wantMsg: "busy"},
		{name: "plain text error", code: 502, body: []byte("bad gateway\n"), wantCode: 502, wantMsg: "bad gateway"},
		{name: "truncated", code: 200, body: body[:len(body)/2], wantErr: true},
		{name: "wrong metadata type", code: 200, body: []byte(`{"type":"sync","metadata":{"a":1}}`), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []api.Instance
			err := decodeResponse(fakeResponse(tt.code, tt.body), "GET /1.0/instances", &got)
			var se *StatusError
			switch {
			case tt.wantCode != 0:
				if !errors.As(err, &se) || se.Code != tt.wantCode || se.Message != tt.wantMsg {
					t.Fatalf("error %v, want StatusError %d %q", err, tt.wantCode, tt.wantMsg)
				}
			case tt.wantErr:
				if err == nil || errors.As(err, &se) {
					t.Fatalf("error %v, want a decoding error", err)
				}
			case err != nil:
				t.Fatal(err)
			default:
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("metadata (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// BenchmarkDecodeRunning10k decodes a GET /1.0/instances answer with
// 10,000 running fleet guests (runningInstances: about three times the
// bytes of stopped instances) as Instances does ("client": the list's own
// parser), and as it did before it ("goccy": goccy/go-json without copies
// of strings), the answer read from its body in both.
func BenchmarkDecodeRunning10k(b *testing.B) {
	body, err := json.Marshal(api.Sync(runningInstances(10000)))
	if err != nil {
		b.Fatal(err)
	}
	summary := summaryBody(b, runningInstances(10000)) // the CLI table's summary
	for _, form := range []struct {
		name string
		body []byte
	}{{"", body}, {"-summary", summary}} {
		b.Run("client"+form.name, func(b *testing.B) {
			defer reportCPU(b, processCPU())
			for b.Loop() {
				var list []api.Instance
				if err := decodeResponse(fakeResponse(200, form.body), "GET", &list); err != nil || len(list) != 10000 {
					b.Fatal(err, len(list))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/list")
			b.ReportMetric(float64(len(form.body))/(1<<20), "MiB")
		})
		b.Run("goccy"+form.name, func(b *testing.B) {
			defer reportCPU(b, processCPU())
			for b.Loop() {
				raw, err := readBody(fakeResponse(200, form.body))
				if err != nil {
					b.Fatal(err)
				}
				var env api.Response[[]api.Instance]
				if err := gojson.UnmarshalWithOption(raw, &env, gojson.DecodeNoCopyString()); err != nil || len(env.Metadata) != 10000 {
					b.Fatal(err, len(env.Metadata))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/list")
		})
	}
}

// summaryBody returns the answer of the CLI table's summary of list
// (?fields=name,status,backend,agent,link,boot,started_at,location): only
// those keys in each object.
func summaryBody(tb testing.TB, list []api.Instance) []byte {
	tb.Helper()
	keys := []string{"name", "status", "backend", "agent", "link", "boot", "started_at", "location"}
	objs := make([]map[string]json.RawMessage, len(list))
	for i, inst := range list {
		b, err := json.Marshal(inst)
		if err != nil {
			tb.Fatal(err)
		}
		var all map[string]json.RawMessage
		if err := json.Unmarshal(b, &all); err != nil {
			tb.Fatal(err)
		}
		objs[i] = map[string]json.RawMessage{}
		for _, k := range keys {
			objs[i][k] = all[k]
		}
	}
	body, err := json.Marshal(api.Sync(objs))
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

// reportCPU reports the CPU time of the process (the decode and its GC)
// per operation since cpu0: on a shared machine it says more than the
// wall time.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/list")
}

// processCPU returns the user+system CPU time this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDecodeInstances10k decodes a GET /1.0/instances answer with
// 10,000 instances: the client (the list parser), one pass of encoding/json
// and the former two passes (envelope with raw metadata, then the metadata).
func BenchmarkDecodeInstances10k(b *testing.B) {
	body, err := json.Marshal(api.Sync(sampleInstances(10000)))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("one-pass", func(b *testing.B) {
		for b.Loop() {
			var list []api.Instance
			if err := decodeResponse(fakeResponse(200, body), "GET", &list); err != nil || len(list) != 10000 {
				b.Fatal(err, len(list))
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/list")
		b.ReportMetric(float64(len(body))/(1<<20), "MiB")
	})
	b.Run("one-pass-encoding-json", func(b *testing.B) {
		for b.Loop() {
			var list []api.Instance
			env := api.Response[any]{Metadata: &list}
			if err := json.Unmarshal(body, &env); err != nil || len(list) != 10000 {
				b.Fatal(err, len(list))
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/list")
	})
	b.Run("two-pass", func(b *testing.B) {
		for b.Loop() {
			raw, _ := io.ReadAll(fakeResponse(200, body).Body)
			var env api.Response[json.RawMessage]
			var list []api.Instance
			if err := json.Unmarshal(raw, &env); err != nil {
				b.Fatal(err)
			}
			if err := json.Unmarshal(env.Metadata, &list); err != nil || len(list) != 10000 {
				b.Fatal(err, len(list))
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/list")
	})
}

// referenceDecode is what encoding/json makes of an answer.
func referenceDecode(body []byte) ([]api.Instance, error) {
	var list []api.Instance
	env := api.Response[any]{Metadata: &list}
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, err
	}
	return list, nil
}

func TestDecodeInstanceListMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []string{"a", "Z", "0", " ", "<", ">", "&", "\"", "\\", "/", "\x00", "\x1f", "\x7f", "é", "\u2028", "😀", "\xff", "\xe2\x80", "\n"}
	str := func() string {
		var b []byte
		for range rng.IntN(10) {
			b = append(b, alphabet[rng.IntN(len(alphabet))]...)
		}
		return string(b)
	}
	random := make([]api.Instance, 300)
	for i := range random {
		created := time.Unix(rng.Int64N(1<<33), rng.Int64N(1e9)).In(time.FixedZone("", (rng.IntN(48)-24)*1800))
		inst := api.Instance{Name: str(), UUID: str(), Backend: str(), Status: str(), StatusCode: rng.IntN(400) - 200,
			Config: map[string]string{str(): str(), str(): str()}, Devices: map[string]map[string]string{str(): {str(): str()}, "n": nil},
			Boot: rng.Int64() - 1<<62, CreatedAt: created, Link: str(), Agent: api.AgentInfo{State: str()},
			DevlxdSocket: str(), Details: map[string]string{str(): str()}}
		switch i % 3 {
		case 0:
			inst.StartedAt, inst.ReadyAt, inst.Agent.Since, inst.Agent.LastHeartbeat = &created, &created, &created, &created
		case 1:
			inst.Config, inst.Devices, inst.Details = nil, nil, nil
		}
		random[i] = inst
	}
	randomBody, err := json.Marshal(api.Sync(random))
	if err != nil {
		t.Fatal(err)
	}
	sample, _ := json.Marshal(api.Sync(sampleInstances(20)))
	running, _ := json.Marshal(api.Sync(runningInstances(20)))
	one := `{"name":"vm1","status_code":1,"config":{"a":"b"},"created_at":"2026-11-22T01:02:03Z","agent":{"state":"none","since":null}}`
	summaries, _ := json.Marshal(api.Sync(summaryOf(runningInstances(20))))
	cliSummaries := summaryBody(t, runningInstances(20))
	// own: the list's own parser (decodeInstanceList) decodes the body;
	// the others it leaves to goccy/go-json or encoding/json.
	tests := []struct {
		name string
		body string
		own  bool
	}{
		{"daemon list", string(sample), true},
		{"running guests", string(running), true},
		{"summaries", string(summaries), true},
		{"CLI table's summaries", string(cliSummaries), true},
		{"random strings", string(randomBody), true},
		{"empty list", `{"type":"sync","metadata":[]}`, true},
		{"null metadata", `{"type":"sync","status":"Success","status_code":200,"operation":"","error_code":0,"error":"","metadata":null}`, true},
		{"white space", " {\n\"metadata\" : [ " + one + " ] , \"type\":\"sync\" }\t", true},
		{"escapes", `{"type":"sync","metadata":[{"name":"a\u00e9\"\\\/\ud83d\ude00","config":{"k\n":"v\u2028"}}]}`, true},
		{"invalid UTF-8", "{\"type\":\"sync\",\"metadata\":[{\"name\":\"a\xff\xe2\x80b\"}]}", true},
		{"nulls", `{"type":"sync","metadata":[{"name":null,"config":null,"devices":{"a":null},"started_at":null,"agent":null,"conditions":null,"profiles":null,"created_at":null,"boot":null}]}`, true},
		{"empty lists", `{"type":"sync","metadata":[{"conditions":[],"profiles":[],"config":{},"devices":{}}]}`, true},
		{"repeated device", `{"type":"sync","metadata":[{"devices":{"a":{"x":"1"},"a":{"y":"2"}}}]}`, true},
		{"timeline and guest", `{"type":"sync","metadata":[{"name":"a","timeline":[{"time":"2026-11-22T01:02:03Z","boot":2,"kind":"state","from":"a","to":"b"}],"guest":{"hostname":"h"}}]}`, true},
		{"timeline", `{"type":"sync","metadata":[{"name":"a","timeline":[]}]}`, true},
		{"negative and zero", `{"type":"sync","metadata":[{"status_code":-5,"boot":0}]}`, true},
		{"unknown key", `{"type":"sync","metadata":[{"name":"a","extra":{"x":[1,2,{"y":null}]}}]}`, false},
		{"other case key", `{"type":"sync","metadata":[{"Name":"a"}]}`, false},
		{"duplicate key", `{"type":"sync","metadata":[{"name":"a","name":"b"}]}`, false},
		{"duplicate map key", `{"type":"sync","metadata":[{"config":{"a":"1","a":"2"}}]}`, true},
		{"null string", `{"type":"sync","metadata":[{"name":null}]}`, true},
		{"null time", `{"type":"sync","metadata":[{"created_at":null}]}`, true},
		{"null element", `{"type":"sync","metadata":[null]}`, false},
		{"leading zero", `{"type":"sync","metadata":[{"boot":01}]}`, false},
		{"float", `{"type":"sync","metadata":[{"status_code":1.5}]}`, false},
		{"exponent", `{"type":"sync","metadata":[{"boot":1e3}]}`, false},
		{"overflow", `{"type":"sync","metadata":[{"boot":99999999999999999999}]}`, false},
		{"string for a number", `{"type":"sync","metadata":[{"boot":"1"}]}`, false},
		{"number for a string", `{"type":"sync","metadata":[{"name":1}]}`, false},
		{"bad time", `{"type":"sync","metadata":[{"created_at":"yesterday"}]}`, false},
		{"bad envelope field", `{"type":"sync","status_code":"200","metadata":[]}`, false},
		{"control character", "{\"type\":\"sync\",\"metadata\":[{\"name\":\"a\x01\"}]}", false},
		{"truncated", string(sample[:len(sample)-3]), false},
		{"truncated in a string", string(running[:len(running)/2]), false},
		{"trailing garbage", string(sample) + "x", false},
		{"not a list", `{"type":"sync","metadata":{"name":"a"}}`, false},
		{"no type", `{"metadata":[]}`, false},
		{"not sync", `{"type":"async","metadata":[]}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, wantErr := referenceDecode([]byte(tt.body))
			own, ok := decodeInstanceList([]byte(tt.body))
			if ok != tt.own {
				t.Fatalf("the list's own parser took it: %v, want %v", ok, tt.own)
			}
			if ok {
				if wantErr != nil {
					t.Fatalf("the list's own parser decoded what encoding/json refuses: %v", wantErr)
				}
				if diff := cmp.Diff(want, own); diff != "" {
					t.Errorf("the list's own parser differs from encoding/json (-want +got):\n%s", diff)
				}
			}
			var got []api.Instance
			err := decodeResponse(fakeResponse(200, []byte(tt.body)), "GET /1.0/instances", &got)
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("error %v, encoding/json says %v", err, wantErr)
			}
			if wantErr != nil {
				return
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("differs from encoding/json (-want +got):\n%s", diff)
			}
		})
	}
}

// summaryOf returns list with only the CLI table's summary keys, as
// ?fields=name,status,backend,agent,link,boot,started_at,location sends
// them (the other keys' zero values are what the JSON of the summary
// leaves out; encoding/json writes them, which is fine for the decoder).
func summaryOf(list []api.Instance) []api.Instance {
	out := make([]api.Instance, len(list))
	for i, inst := range list {
		out[i] = api.Instance{Name: inst.Name, Status: inst.Status, Backend: inst.Backend, Agent: inst.Agent,
			Link: inst.Link, Boot: inst.Boot, StartedAt: inst.StartedAt, Location: inst.Location}
	}
	return out
}

// TestDecodedListOutlivesNextDecode checks that the strings of a decoded
// list, which share the answer's buffer, are not changed by decoding the
// next answer (the decoder's own buffers are reused from call to call).
func TestDecodedListOutlivesNextDecode(t *testing.T) {
	first, second := runningInstances(50), runningInstances(60)
	for i := range second {
		second[i].Name, second[i].Details["guest_dir"] = "other-"+second[i].Name, "/elsewhere/"+second[i].UUID
	}
	var got []api.Instance
	for _, list := range [][]api.Instance{first, second} {
		body, err := json.Marshal(api.Sync(list))
		if err != nil {
			t.Fatal(err)
		}
		var out []api.Instance
		if err := decodeResponse(fakeResponse(200, body), "GET", &out); err != nil {
			t.Fatal(err)
		}
		if got == nil {
			got = out
		}
	}
	if diff := cmp.Diff(first, got); diff != "" {
		t.Fatalf("first list changed after the second decode (-want +got):\n%s", diff)
	}
}

// TestParseUTC: the list parser's own time parse gives what
// time.Time.UnmarshalJSON gives (the same instant and location) for every
// time the daemon writes (UTC, 0 to 9 digits of fraction), and leaves to
// it every other form, valid or not.
func TestParseUTC(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var in []string
	own := 3 // the times parseUTC must take itself: the three daemon's forms below, and
	for i := range 2000 {
		tm := time.Unix(rng.Int64N(1<<35), rng.Int64N(1e9)).UTC()
		switch i % 4 {
		case 1:
			tm = tm.Truncate(time.Second)
		case 2:
			tm = tm.Truncate(time.Millisecond)
		}
		in = append(in, tm.Format(time.RFC3339Nano))
		if tm.Day() <= 28 { // later days are left to UnmarshalJSON's check
			own++
		}
	}
	in = append(in, "2026-11-27T01:28:57.333776222Z", "0000-01-01T00:00:00Z", "2026-02-28T23:59:59.9Z",
		// left to UnmarshalJSON, valid or not:
		"2026-02-29T00:00:00Z", "2024-02-29T00:00:00Z", "2026-01-31T00:00:00Z", "2026-13-01T00:00:00Z",
		"2026-00-01T00:00:00Z", "2026-11-27T24:00:00Z", "2026-11-27T01:60:00Z", "2026-11-27T01:02:60Z",
		"2026-11-27T01:02:03.Z", "2026-11-27T01:02:03.1234567890Z", "2026-11-27t01:02:03Z", "2026-11-27T01:02:03z",
		"2026-11-27T01:02:03+01:00", "2026-11-27T01:02:03.5-00:30", "2026-11-27 01:02:03Z", "-026-11-27T01:02:03Z",
		"2026-11-27T01:02:03,5Z", "2026-1x-27T01:02:03Z", "2026-11-27T01:02:0xZ", "2026-11-27T01:02:03.5x5Z")
	taken := 0
	for _, s := range in {
		got, ok := parseUTC([]byte(s))
		if !ok {
			continue
		}
		taken++
		var want time.Time
		if err := want.UnmarshalJSON([]byte(`"` + s + `"`)); err != nil {
			t.Errorf("%s: parsed to %v, UnmarshalJSON refuses it: %v", s, got, err)
			continue
		}
		if !got.Equal(want) || got.Location() != want.Location() || got.String() != want.String() {
			t.Errorf("%s: parsed %v, UnmarshalJSON %v", s, got, want)
		}
	}
	if taken != own {
		t.Errorf("parsed %d of the times itself, want %d (the daemon's form, days 1 to 28)", taken, own)
	}
}

// FuzzDecodeInstanceList: whatever the body, the list's own parser never
// panics, and a body it takes is one encoding/json decodes to the same
// values (it may leave any body to goccy/go-json and encoding/json).
func FuzzDecodeInstanceList(f *testing.F) {
	sample, _ := json.Marshal(api.Sync(sampleInstances(3)))
	running, _ := json.Marshal(api.Sync(runningInstances(3)))
	for _, s := range []string{
		string(sample), string(running),
		`{"type":"sync","metadata":[]}`,
		`{"type":"sync","metadata":[{"name":"a\u00e9\"\\\/\ud83d\ude00","config":{"k\n":"v\u2028"}}]}`,
		`{"type":"sync","metadata":[{"name":null,"config":null,"devices":{"a":null},"started_at":null,"agent":null}]}`,
		`{"type":"sync","metadata":[{"devices":{"a":{"x":"1"},"a":{"y":"2"}},"boot":-5,"created_at":"2026-11-22T01:02:03.5Z"}]}`,
		`{"type":"sync","metadata":[{"timeline":[{"time":"2026-11-22T01:02:03Z","boot":2}],"guest":{"hostname":"h"}}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		own, ok := decodeInstanceList(body)
		if !ok {
			return
		}
		want, err := referenceDecode(body)
		if err != nil {
			t.Fatalf("the list's own parser took %q, which encoding/json refuses: %v", body, err)
		}
		if diff := cmp.Diff(want, own); diff != "" {
			t.Fatalf("the list's own parser differs from encoding/json on %q (-want +got):\n%s", body, diff)
		}
	})
}
