package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/guestlink/guestlink/core/api/wire"
	"github.com/guestlink/guestlink/core/instance"
)

// fakeResponse returns an answer with the given status and body.
func fakeResponse(code int, body []byte) *http.Response {
	return &http.Response{StatusCode: code, ContentLength: int64(len(body)), Body: io.NopCloser(bytes.NewReader(body))}
}

// sampleInstances returns n instances shaped like the daemon's list.
func sampleInstances(n int) []wire.Instance {
	now := time.Date(2026, 11, 22, 1, 2, 3, 456789, time.UTC)
	list := make([]wire.Instance, n)
	for i := range list {
		started := now.Add(time.Duration(i) * time.Second)
		list[i] = wire.Instance{Instance: instance.Instance{
			Name: fmt.Sprintf("vm%05d", i), UUID: fmt.Sprintf("%08x-0000-4000-8000-000000000000", i),
			Backend: "sim", Status: "Stopped", StatusCode: 102,
			Config:    map[string]string{"user.role": "web <&>", "limits.cpu": "2", "limits.memory": "1GiB", "volatile.uuid": "x"},
			Devices:   map[string]map[string]string{"root": {"type": "disk"}},
			CreatedAt: now, StartedAt: &started,
			Agent: instance.AgentInfo{State: instance.AgentNone},
		}}
	}
	return list
}

func TestDecodeResponse(t *testing.T) {
	list := sampleInstances(3)
	body, err := json.Marshal(wire.Sync(list))
	if err != nil {
		t.Fatal(err)
	}
	errBody, _ := json.Marshal(wire.Error(http.StatusNotFound, `instance "x" not found`))
	tests := []struct {
		name     string
		code     int
		body     []byte
		want     []wire.Instance
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
			var got []wire.Instance
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

// BenchmarkDecodeInstances10k decodes a GET /1.0/instances answer with
// 10,000 instances: the client's single pass against the former two passes
// (envelope with raw metadata, then the metadata).
func BenchmarkDecodeInstances10k(b *testing.B) {
	body, err := json.Marshal(wire.Sync(sampleInstances(10000)))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("one-pass", func(b *testing.B) {
		for b.Loop() {
			var list []wire.Instance
			if err := decodeResponse(fakeResponse(200, body), "GET", &list); err != nil || len(list) != 10000 {
				b.Fatal(err, len(list))
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/list")
		b.ReportMetric(float64(len(body))/(1<<20), "MiB")
	})
	b.Run("two-pass", func(b *testing.B) {
		for b.Loop() {
			raw, _ := io.ReadAll(fakeResponse(200, body).Body)
			var env rawResponse
			var list []wire.Instance
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
