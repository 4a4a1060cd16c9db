package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/errdefs"
)

// TestBusyRetried: a 503 with Retry-After (the daemon's request limit, which
// refuses before anything runs) is sent again; any other 503 is returned.
func TestBusyRetried(t *testing.T) {
	tests := []struct {
		name       string
		refusals   int32  // 503 answers before the success
		retryAfter string // "" for none
		wantErr    bool
		wantCalls  int32
	}{
		{"busy twice, then served", 2, "0", false, 3},
		{"unavailable without Retry-After", 1, "", true, 1},
		{"bad Retry-After", 1, "soon", true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := calls.Add(1)
				w.Header().Set("Content-Type", "application/json")
				if n <= tt.refusals {
					if tt.retryAfter != "" {
						w.Header().Set("Retry-After", tt.retryAfter)
					}
					w.WriteHeader(http.StatusServiceUnavailable)
					_, _ = w.Write([]byte(`{"type":"error","status":"","status_code":0,"operation":"","error_code":503,"error":"the daemon is busy","metadata":null}`))
					return
				}
				_, _ = w.Write([]byte(`{"type":"sync","status":"Success","status_code":200,"operation":"","error_code":0,"error":"","metadata":[]}`))
			}))
			defer srv.Close()
			c, err := client.New(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.Instances(context.Background(), client.InstanceFilter{})
			if (err != nil) != tt.wantErr {
				t.Fatalf("Instances: %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr && !errors.Is(err, errdefs.ErrUnavailable) {
				t.Fatalf("Instances: %v, want ErrUnavailable", err)
			}
			if got := calls.Load(); got != tt.wantCalls {
				t.Fatalf("%d requests, want %d", got, tt.wantCalls)
			}
		})
	}
}
