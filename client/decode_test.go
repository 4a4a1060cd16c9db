package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

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
// bytes of stopped instances) as Instances does.
func BenchmarkDecodeRunning10k(b *testing.B) {
	body, err := json.Marshal(api.Sync(runningInstances(10000)))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		var list []api.Instance
		if err := decodeResponse(fakeResponse(200, body), "GET", &list); err != nil || len(list) != 10000 {
			b.Fatal(err, len(list))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/list")
	b.ReportMetric(float64(len(body))/(1<<20), "MiB")
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
	tests := []struct {
		name string
		body string
	}{
		{"daemon list", string(sample)},
		{"running guests", string(running)},
		{"random strings", string(randomBody)},
		{"empty list", `{"type":"sync","metadata":[]}`},
		{"null metadata", `{"type":"sync","status":"Success","status_code":200,"operation":"","error_code":0,"error":"","metadata":null}`},
		{"white space", " {\n\"metadata\" : [ " + one + " ] , \"type\":\"sync\" }\t"},
		{"escapes", `{"type":"sync","metadata":[{"name":"a\u00e9\"\\\/\ud83d\ude00","config":{"k\n":"v\u2028"}}]}`},
		{"unknown key", `{"type":"sync","metadata":[{"name":"a","extra":{"x":[1,2,{"y":null}]}}]}`},
		{"other case key", `{"type":"sync","metadata":[{"Name":"a"}]}`},
		{"timeline", `{"type":"sync","metadata":[{"name":"a","timeline":[]}]}`},
		{"duplicate key", `{"type":"sync","metadata":[{"name":"a","name":"b"}]}`},
		{"duplicate map key", `{"type":"sync","metadata":[{"config":{"a":"1","a":"2"}}]}`},
		{"null string", `{"type":"sync","metadata":[{"name":null}]}`},
		{"null time", `{"type":"sync","metadata":[{"created_at":null}]}`},
		{"leading zero", `{"type":"sync","metadata":[{"boot":01}]}`},
		{"float", `{"type":"sync","metadata":[{"status_code":1.5}]}`},
		{"bad time", `{"type":"sync","metadata":[{"created_at":"yesterday"}]}`},
		{"truncated", string(sample[:len(sample)-3])},
		{"trailing garbage", string(sample) + "x"},
		{"not a list", `{"type":"sync","metadata":{"name":"a"}}`},
		{"no type", `{"metadata":[]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, wantErr := referenceDecode([]byte(tt.body))
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
