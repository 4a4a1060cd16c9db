package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/plugins/sim/simbackend"
)

// createCalled matches the sim plugin's debug line, relogged by the daemon,
// that opens every Create it receives, for the instance named in group 1.
var createCalled = regexp.MustCompile(`create called.*name=("?)([a-z0-9-]+)`)

// createsSeen returns the instance names of the Create calls the sim
// plugin logged so far, in order.
func createsSeen(log string) []string {
	var names []string
	for _, m := range createCalled.FindAllStringSubmatch(log, -1) {
		names = append(names, m[2])
	}
	return names
}

// TestConfigKeysCheckedBeforePlugin runs the daemon (debug log) with the
// real sim plugin, which declares its keys in Info.ConfigSchema. A launch
// with sim.bogus, through the CLI and as a raw POST, is refused by the
// daemon with 400 naming the key and the backend, and the plugin never
// sees it: the plugin logs every Create it receives, and once a later,
// valid create shows in the log, no line for the refused ones came before
// it. config set (PATCH) of sim.bogus is refused the same way, a declared
// key is taken, and unsetting an undeclared key is allowed.
func TestConfigKeysCheckedBeforePlugin(t *testing.T) {
	t.Parallel()
	d := newDaemon(t, "--log-level", "debug")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	const want = `unknown configuration key "sim.bogus": backend "sim" has no such key`
	_, errOut, err := d.runCLI(ctx, "launch", "x", "--backend", "sim", "-c", "sim.bogus=1")
	if err == nil || !strings.Contains(errOut, want) {
		t.Fatalf("guestlink launch x --backend sim -c sim.bogus=1: err %v, stderr %q; want a refusal containing %q", err, errOut, want)
	}
	code, msg := adminDo(ctx, t, d, http.MethodPost, "/1.0/instances",
		`{"name":"x2","backend":"sim","config":{"sim.bogus":"1"},"start":true}`)
	if code != http.StatusBadRequest || !strings.Contains(msg, want) {
		t.Fatalf("POST /1.0/instances with sim.bogus = %d %q, want 400 containing %q", code, msg, want)
	}
	if insts, err := d.client.Instances(ctx, client.InstanceFilter{}); err != nil || len(insts) != 0 {
		t.Fatalf("after refused launches the daemon lists %d instances (%v), want none", len(insts), err)
	}

	// The control: a create with a declared key reaches the plugin, and
	// its log line shows; the refused ones would have been logged first.
	if code, msg := adminDo(ctx, t, d, http.MethodPost, "/1.0/instances",
		`{"name":"ok1","backend":"sim","config":{"sim.ring_size":"16"}}`); code >= 300 {
		t.Fatalf("POST /1.0/instances ok1 with sim.ring_size = %d %q", code, msg)
	}
	testwait.For(t, "the sim plugin to log the Create of ok1", opTimeout, func() bool {
		return slices.Contains(createsSeen(d.log()), "ok1")
	})
	if got := createsSeen(d.log()); !slices.Equal(got, []string{"ok1"}) {
		t.Fatalf("the sim plugin received Create for %q, want only ok1 (the refused x and x2 must not reach it)", got)
	}

	// config set (PATCH /1.0/instances/ok1).
	_, errOut, err = d.runCLI(ctx, "config", "set", "ok1", "sim.bogus=1")
	if err == nil || !strings.Contains(errOut, want) {
		t.Fatalf("guestlink config set ok1 sim.bogus=1: err %v, stderr %q; want a refusal containing %q", err, errOut, want)
	}
	code, msg = adminDo(ctx, t, d, http.MethodPatch, "/1.0/instances/ok1", `{"config":{"sim.bogus":"1"}}`)
	if code != http.StatusBadRequest || !strings.Contains(msg, want) {
		t.Fatalf("PATCH /1.0/instances/ok1 with sim.bogus = %d %q, want 400 containing %q", code, msg, want)
	}
	d.cli(ctx, "config", "set", "ok1", "sim.ring_size=32")
	d.cli(ctx, "config", "unset", "ok1", "sim.bogus")
	inst, err := d.client.Instance(ctx, "ok1")
	if err != nil {
		t.Fatal(err)
	}
	if inst.Config["sim.ring_size"] != "32" || inst.Config["sim.bogus"] != "" {
		t.Fatalf("ok1's config = %v, want sim.ring_size=32 and no sim.bogus", inst.Config)
	}
}

// TestBackendsInfo checks guestlink backends info NAME against the sim
// plugin's declared schema: the table lists every key with its type, JSON
// and YAML carry the keys of GET /1.0/backends/sim, and an unknown backend
// is 404 naming it.
func TestBackendsInfo(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	out := d.cli(ctx, "backends", "info", "sim")
	if !strings.Contains(out, "Config keys (prefixes: sim.):") {
		t.Fatalf("guestlink backends info sim has no config key table:\n%s", out)
	}
	for _, k := range simbackend.Schema {
		var found bool
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == k.Name && f[1] == string(k.Type) {
				found = true
			}
		}
		if !found {
			t.Errorf("guestlink backends info sim has no row %q of type %s:\n%s", k.Name, k.Type, out)
		}
	}

	var b api.Backend
	if err := json.Unmarshal([]byte(d.cli(ctx, "backends", "info", "sim", "--format", "json")), &b); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, k := range b.ConfigKeys {
		names = append(names, k.Name)
		if k.Doc == "" || k.Type == "" {
			t.Errorf("key %+v has no doc or type", k)
		}
	}
	var want []string
	for _, k := range simbackend.Schema {
		want = append(want, k.Name)
	}
	if b.Name != "sim" || b.Health != "healthy" || !slices.Equal(names, want) || !slices.Equal(b.ConfigPrefixes, []string{"sim."}) {
		t.Fatalf("backends info sim JSON = name %q health %q prefixes %q keys %q; want sim, healthy, [sim.], %q", b.Name, b.Health, b.ConfigPrefixes, names, want)
	}
	yaml := d.cli(ctx, "backends", "info", "sim", "--format", "yaml")
	if !strings.Contains(yaml, "config_keys:\n") || !strings.Contains(yaml, "name: sim.ring_size\n") {
		t.Fatalf("backends info sim YAML has no config keys:\n%s", yaml)
	}
	// The list stays as it was: no keys there.
	list, err := d.client.Backends(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range list {
		if len(b.ConfigKeys) != 0 {
			t.Errorf("GET /1.0/backends lists the keys of %s; only GET /1.0/backends/{name} has them", b.Name)
		}
	}

	_, errOut, err := d.runCLI(ctx, "backends", "info", "nosuch")
	if err == nil || !strings.Contains(errOut, `backend "nosuch": no such plugin`) {
		t.Fatalf("guestlink backends info nosuch: err %v, stderr %q; want a not-found error naming it", err, errOut)
	}
	if code, _ := adminDo(ctx, t, d, http.MethodGet, "/1.0/backends/nosuch", ""); code != http.StatusNotFound {
		t.Fatalf("GET /1.0/backends/nosuch = %d, want 404", code)
	}
}
