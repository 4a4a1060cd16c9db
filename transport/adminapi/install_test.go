package adminapi_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

func TestInstallAndReloadBackend(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{})
	tests := []struct {
		name, path, body string
		code             int
		wantErr          string
		wantName         string
	}{
		{"install", "/1.0/backends", `{"path":"/opt/plugins/vbox"}`, 200, "", "vbox"},
		{"install named", "/1.0/backends", `{"path":"/opt/plugins/vbox","name":"vbox2"}`, 200, "", "vbox2"},
		{"relative path", "/1.0/backends", `{"path":"vbox"}`, 400, `invalid path "vbox": an absolute path of a file on the daemon's machine is required`, ""},
		{"bad name", "/1.0/backends", `{"path":"/x/y","name":"SHA256SUMS"}`, 400, `invalid backend name "SHA256SUMS": must be a plain file name, not hidden, not SHA256SUMS: invalid argument`, ""},
		{"unknown field", "/1.0/backends", `{"path":"/x/y","force":true}`, 400, `invalid request body: json: unknown field "force"`, ""},
		{"reload", "/1.0/backends/sim/reload", "", 200, "", "sim"},
		{"reload unknown", "/1.0/backends/vbox9/reload", "", 404, `restarting backend "vbox9": not found`, ""},
		{"reload tampered", "/1.0/backends/tampered/reload", "", 409, "", ""},
		{"reload bad name", "/1.0/backends/..%2Fsim/reload", "", 400, `invalid backend name "../sim": must be a plain file name, not hidden, not SHA256SUMS: invalid argument`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, env := call(t, srv, "POST", tt.path, tt.body)
			if code != tt.code {
				t.Fatalf("status %d (%s), want %d", code, env.Error, tt.code)
			}
			checkEnvelope(t, code, env)
			if code != 200 {
				if tt.wantErr != "" && env.Error != tt.wantErr {
					t.Fatalf("error %q, want %q", env.Error, tt.wantErr)
				}
				if tt.name == "reload tampered" && strings.Count(env.Error, "sha256 ") != 2 {
					t.Fatalf("checksum error %q does not show both hashes", env.Error)
				}
				return
			}
			var b api.Backend
			if err := json.Unmarshal(env.Metadata, &b); err != nil {
				t.Fatal(err)
			}
			if b.Name != tt.wantName || b.Health != "healthy" || b.PID == 0 {
				t.Fatalf("backend = %+v, want %s healthy", b, tt.wantName)
			}
		})
	}
}
