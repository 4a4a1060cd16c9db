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

// TestBackendsInfo checks guestlink backends info against the test
// server's backends: the health row, then the declared keys as a table (a
// plugin that has not started says so), JSON with the keys, and a 404.
func TestBackendsInfo(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{})
	out := ok(t, srv, "backends", "info", "sim")
	for _, want := range []string{
		"sim   healthy",
		"\nConfig keys (prefixes: sim.):\n",
		"KEY            TYPE    DEFAULT    MEANING\n",
		"sim.command    string  `sleep 1`  guest command\n",
		"sim.ring_size  int     `16`       ring bytes\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("backends info sim has no %q:\n%s", want, out)
		}
	}
	if out := ok(t, srv, "backends", "info", "qemu"); !strings.Contains(out, "qemu has told no config keys: it owns none, or has not started yet\n") {
		t.Errorf("backends info of a plugin without Info does not say so:\n%s", out)
	}
	var b api.Backend
	if err := json.Unmarshal([]byte(ok(t, srv, "backends", "info", "sim", "--format", "json")), &b); err != nil {
		t.Fatal(err)
	}
	if len(b.ConfigKeys) != 2 || b.ConfigKeys[1] != (api.BackendConfigKey{Name: "sim.ring_size", Type: "int", Default: "`16`", Doc: "ring bytes"}) {
		t.Fatalf("JSON keys = %+v", b.ConfigKeys)
	}
	fails(t, srv, `backend "vbox": no such plugin: not found`, "backends", "info", "vbox")
}
