package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

func TestBackendsRestart(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{})
	tests := []struct {
		name    string
		args    []string
		want    string // stdout, or the error for a failure
		wantErr bool
	}{
		{"restart", []string{"backends", "restart", "qemu"}, "Backend qemu restarted: healthy, pid 4343\n", false},
		{"unknown", []string{"backends", "restart", "vbox"}, `restarting backend "vbox": not found`, true},
		{"no name", []string{"backends", "restart"}, "guestlink backends restart takes 1 argument(s), got 0 (usage: guestlink backends restart NAME [flags])", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.wantErr {
				fails(t, srv, tt.want, tt.args...)
				return
			}
			if out := ok(t, srv, tt.args...); out != tt.want {
				t.Fatalf("stdout %q, want %q", out, tt.want)
			}
		})
	}
	var b api.Backend
	if err := json.Unmarshal([]byte(ok(t, srv, "backends", "restart", "sim", "--format", "json")), &b); err != nil {
		t.Fatal(err)
	}
	if b.Name != "sim" || b.Health != "healthy" || b.Restarts != 1 {
		t.Fatalf("JSON answer %+v", b)
	}
	if out := ok(t, srv, "backends"); !strings.Contains(out, "qemu  healthy") {
		t.Fatalf("backends after the restart:\n%s", out)
	}
}
