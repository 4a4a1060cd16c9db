package adminapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
)

// marshalList is the reference: what encoding/json makes of the answer in
// the API's type (whose JSON is the old shape of the service's view:
// TestWireInstanceMatchesServiceJSON).
func marshalList(t testing.TB, list []*instance.Instance) []byte {
	t.Helper()
	out := make([]api.Instance, 0, len(list))
	for _, inst := range list {
		out = append(out, instance.WireInstance(inst, nil))
	}
	want, err := json.Marshal(api.Sync(out))
	if err != nil {
		t.Fatal(err)
	}
	return want
}

func TestInstanceListMatchesEncodingJSON(t *testing.T) {
	zone := time.FixedZone("x", -(3*3600 + 30*60))
	t1 := time.Date(2026, 11, 22, 1, 2, 3, 456789000, time.UTC)
	t2 := time.Date(1999, 1, 2, 3, 4, 5, 0, zone)
	t3 := time.Date(2026, 1, 1, 0, 0, 0, 1, time.Local)
	odd := "a<b>&c\"d\\e\x00\x01\x1f\x7f\t\n\r\b\f é☃😀 \u2028\u2029 \xff\xfe end"
	tests := []struct {
		name string
		list []*instance.Instance
	}{
		{"empty", nil},
		{"zero instance", []*instance.Instance{{}}},
		{"full", []*instance.Instance{{
			Name: "vm1", UUID: "u-1", Backend: "sim", Status: "Ready", StatusCode: 103,
			Config:  map[string]string{"z": "1", "a": "2", "user.x": odd, odd: "k"},
			Devices: map[string]map[string]string{"root": {"type": "disk", "path": "/"}, "eth0": {"type": "nic"}, "empty": {}, "nil": nil},
			Boot:    -7, CreatedAt: t1, StartedAt: &t2, ReadyAt: &t3, Link: "hybrid",
			Agent:        instance.AgentInfo{State: instance.AgentConnected, LastHeartbeat: &t1, Since: &t2},
			DevlxdSocket: "/tmp/x<y>/sock", Details: map[string]string{"pid": "42", "b": odd},
		}}},
		{"empty maps", []*instance.Instance{{Name: odd, Config: map[string]string{}, Devices: map[string]map[string]string{}, Details: map[string]string{}}}},
		{"running fleet guests", FleetViews(40)},
		{"conditions nil, empty, odd", []*instance.Instance{{Name: "a"}, {Name: "b", Conditions: []instance.Condition{}},
			{Name: "c", Conditions: []instance.Condition{{Type: odd, Status: "True", Reason: odd, Message: odd, LastTransitionTime: t2}}}}},
		// More than the encoder's first chunks (16 KiB, doubling up to 1
		// MiB): instances span chunk boundaries.
		{"many chunks", FleetViews(3000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := appendInstanceList(tt.list)
			if err != nil {
				t.Fatal(err)
			}
			if want := marshalList(t, tt.list); !bytes.Equal(got, want) {
				t.Fatalf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
	t.Run("random strings", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		alphabet := []string{"a", "Z", "0", " ", "<", ">", "&", "\"", "\\", "/", "\x00", "\x1f", "\x7f", "é", "\u2028", "\u2029", "😀", "\xff", "\xe2\x80", "\n"}
		str := func() string {
			var b []byte
			for range rng.IntN(12) {
				b = append(b, alphabet[rng.IntN(len(alphabet))]...)
			}
			return string(b)
		}
		var list []*instance.Instance
		for i := range 500 {
			created := time.Unix(rng.Int64N(1<<33), rng.Int64N(1e9)).In(time.FixedZone("", (rng.IntN(48)-24)*1800))
			inst := &instance.Instance{Name: str(), UUID: str(), Backend: str(), Status: str(), StatusCode: rng.IntN(400) - 200,
				Config: map[string]string{str(): str(), str(): str()}, Devices: map[string]map[string]string{str(): {str(): str()}},
				Boot: rng.Int64(), CreatedAt: created, Link: str(), Agent: instance.AgentInfo{State: instance.AgentState(str())},
				DevlxdSocket: str(), Details: map[string]string{str(): str()}}
			if i%2 == 0 {
				inst.StartedAt, inst.Agent.Since = &created, &created
				inst.Conditions = []instance.Condition{{Type: str(), Status: str(), Reason: str(), Message: str(), LastTransitionTime: created}}
			}
			list = append(list, inst)
		}
		got, err := appendInstanceList(list)
		if err != nil {
			t.Fatal(err)
		}
		if want := marshalList(t, list); !bytes.Equal(got, want) {
			t.Fatalf("differs from encoding/json:\n%s\n%s", got, want)
		}
	})
	t.Run("year out of range", func(t *testing.T) {
		bad := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
		if _, err := appendInstanceList([]*instance.Instance{{Name: "vm1", StartedAt: &bad}}); err == nil {
			t.Fatal("no error for year 10000")
		}
	})
}

// TestWireInstanceMatchesServiceJSON checks that the API's own instance
// object encodes exactly as the service's view did when the API embedded it
// (same field names, order and omitempty, timeline included): the fixture
// testdata/wire-instance-v1.json is that JSON, captured before the view
// lost its JSON tags.
func TestWireInstanceMatchesServiceJSON(t *testing.T) {
	raw, err := os.ReadFile("testdata/wire-instance-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	var fixture map[string]map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fixture); err != nil {
		t.Fatal(err)
	}
	t1 := time.Date(2026, 11, 22, 1, 2, 3, 456789000, time.UTC)
	t2 := time.Date(1999, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	rich := &instance.Instance{
		Name: "web1", UUID: "u-1", Backend: "sim", Status: "Ready", StatusCode: 113,
		Config:  map[string]string{"volatile.last_state.ready": "true", "user.x": "<&>"},
		Devices: map[string]map[string]string{"root": {"type": "disk", "path": "/"}},
		Boot:    3, CreatedAt: t1, StartedAt: &t2, ReadyAt: &t1, Link: "vsock",
		Agent:        instance.AgentInfo{State: instance.AgentConnected, LastHeartbeat: &t1, Since: &t2},
		DevlxdSocket: "/run/x/sock", Details: map[string]string{"pid": "42"},
	}
	tl := []instance.TimelineEntry{
		{Time: t1, Boot: 3, Kind: "state", From: "Stopped", To: "Running", Cause: "api"},
		{Time: t2, Boot: 3, Kind: "ready", From: "false", To: "true", Cause: "devlxd", Detail: "d"},
	}
	for _, tt := range []struct {
		name string
		inst *instance.Instance
		tl   []instance.TimelineEntry
	}{
		{"rich with timeline", rich, tl},
		{"rich without timeline", rich, nil},
		{"empty timeline", rich, []instance.TimelineEntry{}},
		{"zero", &instance.Instance{}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			old, ok := fixture[tt.name]
			if !ok {
				t.Fatalf("the fixture has no case %q", tt.name)
			}
			parts := map[string]any{"instance": instance.WireInstance(tt.inst, tt.tl), "state": instance.WireState(tt.inst)}
			if tt.tl != nil {
				parts["timeline"] = instance.WireTimeline(tt.tl)
			}
			for part, v := range parts {
				got, err := json.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				var want bytes.Buffer
				if err := json.Compact(&want, old[part]); err != nil {
					t.Fatalf("fixture %q %s: %v", tt.name, part, err)
				}
				if !bytes.Equal(got, want.Bytes()) {
					t.Errorf("%s JSON differs from the old shape:\n got %s\nwant %s", part, got, want.Bytes())
				}
			}
		})
	}
}

// sampleList returns n instances shaped like the daemon's stopped sim
// instances (4-key config, one device).
func sampleList(n int) []*instance.Instance {
	now := time.Now()
	list := make([]*instance.Instance, n)
	for i := range list {
		list[i] = &instance.Instance{Name: fmt.Sprintf("vm%05d", i), UUID: fmt.Sprintf("%08x-1f2e-4d3c-8b4a-0123456789ab", i),
			Backend: "sim", Status: "Stopped", StatusCode: 102,
			Config:    map[string]string{"user.role": "web", "limits.cpu": "2", "limits.memory": "1GiB", "volatile.uuid": "x"},
			Devices:   map[string]map[string]string{"root": {"type": "disk"}},
			CreatedAt: now, Agent: instance.AgentInfo{State: instance.AgentNone}}
	}
	return list
}

// BenchmarkInstanceList10k encodes the GET /1.0/instances answer for 10,000
// instances: the list encoder (goccy/go-json, one instance at a time)
// against encoding/json (as fiber's c.JSON did, including the copy).
func BenchmarkInstanceList10k(b *testing.B) {
	list := sampleList(10000)
	b.Run("append", func(b *testing.B) {
		for b.Loop() {
			if _, err := appendInstanceList(list); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/list")
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			marshalList(b, list)
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/list")
	})
}

// TestWireEventMatchesBusJSON checks that an event of the bus, as GET
// /1.0/events sends it (WireEvent), is byte for byte the message sent when
// the API encoded core/events.Event itself: the fixture
// core/events/testdata/wire-events-v1.json was captured before the bus's
// types lost their JSON tags. The message reads back into the client's
// api.Event and its lifecycle metadata into the bus's.
func TestWireEventMatchesBusJSON(t *testing.T) {
	raw, err := os.ReadFile("../../core/events/testdata/wire-events-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	var fixture map[string]map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fixture); err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 11, 22, 1, 2, 3, 456789000, time.UTC)
	for _, tt := range []struct {
		name string
		ev   events.Event
	}{
		{"lifecycle with requestor", events.NewLifecycle(events.InstanceReady, "web1",
			map[string]any{"k": "<v>&", "n": 1.5, "nested": map[string]any{"a": []any{1, "x"}}},
			&events.Requestor{Username: "alice", Protocol: "tls", Address: "10.0.0.5:41234", UID: "1000",
				Fingerprint: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"})},
		{"lifecycle without requestor", events.NewLifecycle(events.InstanceStarted, "web2", nil, nil)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ev := tt.ev
			ev.ID, ev.Timestamp = 42, ts
			got, err := json.Marshal(WireEvent(ev))
			if err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			if err := json.Compact(&want, fixture[tt.name]["sent"]); err != nil {
				t.Fatalf("fixture %q: %v", tt.name, err)
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("event JSON differs from the old message:\n got %s\nwant %s", got, want.Bytes())
			}
			var client api.Event
			if err := json.Unmarshal(got, &client); err != nil {
				t.Fatal(err)
			}
			wireLC, err := client.Lifecycle()
			if err != nil {
				t.Fatal(err)
			}
			busLC, err := ev.Lifecycle()
			if err != nil {
				t.Fatal(err)
			}
			if wireLC.Action != busLC.Action || wireLC.Source != busLC.Source || (wireLC.Requestor == nil) != (busLC.Requestor == nil) ||
				(busLC.Requestor != nil && api.EventRequestor(*busLC.Requestor) != *wireLC.Requestor) {
				t.Fatalf("lifecycle read by the client %+v, the bus's %+v", wireLC, busLC)
			}
		})
	}
}

// BenchmarkInstanceListRunning10k encodes the GET /1.0/instances answer for
// 10,000 running fleet guests (FleetViews: agent, details, conditions; about
// three times the bytes of a stopped instance): the list encoder against
// encoding/json.
func BenchmarkInstanceListRunning10k(b *testing.B) {
	list := FleetViews(10000)
	b.Run("append", func(b *testing.B) {
		var n int
		for b.Loop() {
			body, err := appendInstanceList(list)
			if err != nil {
				b.Fatal(err)
			}
			n = len(body)
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/list")
		b.ReportMetric(float64(n)/(1<<20), "MiB")
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			marshalList(b, list)
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/list")
	})
}

// TestChunkPools: every chunk size a list answer uses (listChunkMin
// doubling to listChunkMax) has its own pool and no other size has one;
// a closed answer's chunks are emptied and the answer reads nothing more.
func TestChunkPools(t *testing.T) {
	if listChunkMin<<(chunkSizes-1) != listChunkMax {
		t.Fatalf("chunkSizes %d does not reach listChunkMax", chunkSizes)
	}
	seen := map[*sync.Pool]bool{}
	for size := listChunkMin; size <= listChunkMax; size *= 2 {
		p := chunkPool(size)
		if p == nil || seen[p] {
			t.Fatalf("chunk size %d: pool %p (seen before: %v)", size, p, seen[p])
		}
		seen[p] = true
	}
	for _, size := range []int{0, 1, listChunkMin - 1, listChunkMin + 1, 3 * listChunkMin, 2 * listChunkMax} {
		if p := chunkPool(size); p != nil {
			t.Errorf("size %d has a pool", size)
		}
	}
	e := newListEncoder()
	for range 3000 {
		_, _ = e.Write(make([]byte, 1000)) // 3 MB: chunks of every size
	}
	r, n := e.reader()
	if n != e.size || len(e.chunks) < chunkSizes {
		t.Fatalf("answer of %d bytes in %d chunks", n, len(e.chunks))
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if m, err := r.Read(make([]byte, 10)); m != 0 || err != io.EOF {
		t.Fatalf("a closed answer read %d bytes, %v", m, err)
	}
}
