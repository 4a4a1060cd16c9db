package devlxdapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// golden compares got with testdata/name, rewriting it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatalf("writing golden %s: %v", path, err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden %s: %v (run with -update to create it)", path, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s mismatch:\n got: %q\nwant: %q", name, got, want)
	}
}

func TestEnvelopes(t *testing.T) {
	info := NewInfo(true, "host1", InstanceTypeVM)
	tests := []struct {
		name string
		body func() ([]byte, error)
	}{
		{"sync_info", func() ([]byte, error) { return SyncResponse(info) }},
		{"sync_info_zero", func() ([]byte, error) { return SyncResponse(Info{APIVersion: "1.0"}) }},
		{"sync_null", func() ([]byte, error) { return SyncResponse(nil) }},
		{"sync_raw_value", func() ([]byte, error) { return SyncResponse("#cloud-config\nruncmd: [echo %s <&>]\n") }},
		{"sync_list", func() ([]byte, error) { return SyncResponse([]string{"/1.0"}) }},
		{"error_forbidden", func() ([]byte, error) { return ErrorResponse(http.StatusForbidden, ""), nil }},
		{"error_state", func() ([]byte, error) { return ErrorResponse(http.StatusBadRequest, `Invalid state "ready"`), nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.body()
			if err != nil {
				t.Fatalf("encoding: %v", err)
			}
			golden(t, tt.name+".json", b)
			if _, err := ParseResponse(b); err != nil {
				t.Fatalf("ParseResponse of own output: %v", err)
			}
		})
	}
}

func TestParseResponseRejects(t *testing.T) {
	tests := []struct {
		name string
		body string
	}{
		{"empty", ""},
		{"not json", "hello"},
		{"unknown type", `{"type":"async","status_code":100}`},
		{"error without code", `{"type":"error","error":"x"}`},
		{"error with 200", `{"type":"error","error_code":200}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseResponse([]byte(tt.body))
			if !errors.Is(err, ErrInvalidEnvelope) {
				t.Fatalf("ParseResponse(%q) error = %v, want ErrInvalidEnvelope", tt.body, err)
			}
		})
	}
}

// dump renders a recorded response as status, sorted headers and body.
func dump(rec *httptest.ResponseRecorder) []byte {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "%d\n", rec.Code)
	keys := make([]string, 0, len(rec.Header()))
	for k := range rec.Header() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range rec.Header()[k] {
			fmt.Fprintf(&buf, "%s: %s\n", k, v)
		}
	}
	buf.WriteString("\n")
	buf.Write(rec.Body.Bytes())
	return buf.Bytes()
}

func TestWriteGuest(t *testing.T) {
	mustSync := func(v any) *Response {
		b, err := SyncResponse(v)
		if err != nil {
			t.Fatalf("SyncResponse: %v", err)
		}
		r, err := ParseResponse(b)
		if err != nil {
			t.Fatalf("ParseResponse: %v", err)
		}
		return r
	}
	mustErr := func(code int, msg string) *Response {
		r, err := ParseResponse(ErrorResponse(code, msg))
		if err != nil {
			t.Fatalf("ParseResponse: %v", err)
		}
		return r
	}
	tests := []struct {
		name string
		path string
		env  *Response
	}{
		{"root", "/", mustSync([]string{"/1.0"})},
		{"info", "/1.0", mustSync(NewInfo(false, "host1", InstanceTypeVM))},
		{"patch", "/1.0", mustSync(nil)},
		{"config_list", "/1.0/config", mustSync([]string{"/1.0/config/user.foo", "/1.0/config/cloud-init.user-data"})},
		{"config_raw", "/1.0/config/cloud-init.user-data", mustSync("#cloud-config\nruncmd:\n - echo %s <&>\n")},
		{"config_empty_line", "/1.0/config/user.x", mustSync("a\n\n")},
		{"meta_data", "/1.0/meta-data", mustSync("instance-id: abc\nlocal-hostname: web1\n")},
		{"devices", "/1.0/devices", mustSync(map[string]map[string]string{"eth0": {"type": "nic", "hwaddr": "00:16:3e:00:00:01"}})},
		{"forbidden", "/1.0/config/volatile.x", mustErr(http.StatusForbidden, "")},
		{"not_found", "/1.0/config/user.missing", mustErr(http.StatusNotFound, "Not Found")},
		{"bad_state", "/1.0", mustErr(http.StatusBadRequest, `Invalid state "ready"`)},
		{"raw_not_string", "/1.0/meta-data", mustSync(42)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			WriteGuest(rec, tt.path, tt.env)
			golden(t, "guest_"+tt.name+".txt", dump(rec))
		})
	}
}

func TestRawValueByteExact(t *testing.T) {
	values := []string{"", "%s", "a\nb\n", "#cloud-config\n", "tab\tquote\"back\\slash", "ünï<>&", "\x00\x01"}
	for _, v := range values {
		t.Run(fmt.Sprintf("%q", v), func(t *testing.T) {
			b, err := SyncResponse(v)
			if err != nil {
				t.Fatalf("SyncResponse: %v", err)
			}
			env, err := ParseResponse(b)
			if err != nil {
				t.Fatalf("ParseResponse: %v", err)
			}
			rec := httptest.NewRecorder()
			WriteGuest(rec, "/1.0/config/user.k", env)
			if v == "" {
				return // an empty value is a 404 decided by the daemon, never sent
			}
			if got := rec.Body.String(); got != v {
				t.Fatalf("body = %q, want %q", got, v)
			}
		})
	}
}

func TestInfoNeverNull(t *testing.T) {
	b, err := json.Marshal(Info{})
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	if !bytes.Contains(b, []byte(`"supported_storage_drivers":[]`)) {
		t.Fatalf("Info{} = %s, want supported_storage_drivers []", b)
	}
}

func TestIsRawPath(t *testing.T) {
	tests := map[string]bool{
		"/1.0/meta-data": true, "/1.0/config/user.a": true, "/1.0/config/": false,
		"/1.0/config": false, "/1.0": false, "/": false, "/1.0/devices": false,
	}
	for p, want := range tests {
		t.Run(p, func(t *testing.T) {
			if got := IsRawPath(p); got != want {
				t.Fatalf("IsRawPath(%q) = %v, want %v", p, got, want)
			}
		})
	}
}

// spacedMarshaler answers JSON with insignificant white space, which the
// envelope must compact.
type spacedMarshaler struct{}

func (spacedMarshaler) MarshalJSON() ([]byte, error) {
	return []byte("{ \"a\" : [ 1 , \"<&>\" ] }\n"), nil
}

// TestSyncResponseBytes checks that SyncResponse, which writes the envelope
// around the metadata as constant bytes, gives exactly what encoding the
// whole envelope gives (as it did before).
func TestSyncResponseBytes(t *testing.T) {
	values := []any{
		nil, NewInfo(false, "h<&>\u2028", InstanceTypeContainer), Info{}, "", "#cloud-config\n\t<&>\u2028\u2029 é",
		[]string{}, []string(nil), map[string]string{"b": "2", "a": "<1>"}, map[string]any{"x": []any{1.5, nil, true}},
		42, -0.0, spacedMarshaler{}, json.RawMessage(` [1, 2] `), struct {
			A string `json:"a,omitempty"`
			B *int   `json:"b"`
		}{},
	}
	for i, v := range values {
		got, err := SyncResponse(v)
		if err != nil {
			t.Fatalf("value %d (%#v): %v", i, v, err)
		}
		meta, err := encode(v)
		if err != nil {
			t.Fatal(err)
		}
		want, err := encode(&Response{Type: TypeSync, Status: "Success", StatusCode: http.StatusOK, Metadata: bytes.TrimRight(meta, "\n")})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("value %d (%#v):\n got %q\nwant %q", i, v, got, want)
		}
	}
	if _, err := SyncResponse(math.NaN()); err == nil {
		t.Error("SyncResponse(NaN) succeeded")
	}
}

func BenchmarkSyncResponse(b *testing.B) {
	info := NewInfo(true, "host1", InstanceTypeVM)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := SyncResponse(info); err != nil {
			b.Fatal(err)
		}
	}
}
