package adminapi_test

import (
	"encoding/json"
	"testing"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

func TestRestartBackend(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{})
	tests := []struct {
		name, path, body string
		code             int
		wantErr          string
	}{
		{"restart", "/1.0/backends/qemu/restart", "", 200, ""},
		{"restart with an empty object", "/1.0/backends/sim/restart", "{}", 200, ""},
		{"unknown backend", "/1.0/backends/vbox/restart", "", 404, `restarting backend "vbox": not found`},
		{"bad name", "/1.0/backends/..%2Fsim/restart", "", 400, `invalid backend name "../sim": must be a plugin file name`},
		{"unknown field", "/1.0/backends/sim/restart", `{"force":true}`, 400, `invalid request body: json: unknown field "force"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, env := call(t, srv, "POST", tt.path, tt.body)
			if code != tt.code {
				t.Fatalf("status %d (%s), want %d", code, env.Error, tt.code)
			}
			checkEnvelope(t, code, env)
			if tt.wantErr != "" {
				if env.Error != tt.wantErr {
					t.Fatalf("error %q, want %q", env.Error, tt.wantErr)
				}
				return
			}
			var b api.Backend
			if err := json.Unmarshal(env.Metadata, &b); err != nil {
				t.Fatal(err)
			}
			if b.Health != "healthy" || b.Failures != 0 || b.NextRetryAt != nil || b.PID == 0 {
				t.Fatalf("backend after restart = %+v", b)
			}
		})
	}
	var list []api.Backend
	if err := json.Unmarshal(mustCall(t, srv, "GET", "/1.0/backends", "", 200).Metadata, &list); err != nil {
		t.Fatal(err)
	}
	for _, b := range list {
		if b.Name == "qemu" && (b.Restarts != 3 || b.Health != "healthy") {
			t.Fatalf("qemu after restart = %+v, want 3 restarts, healthy", b)
		}
	}
}
