package devlxd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/guestlink/guestlink/errdefs"
)

// dirImages is an ImageStore over a directory: <fingerprint> files.
type dirImages string

func (d dirImages) ImageFile(_ context.Context, fp string) (string, string, error) {
	p := filepath.Join(string(d), fp)
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		return "", "", fmt.Errorf("image %q: %w", fp, errdefs.ErrNotFound)
	} else if err != nil {
		return "", "", err
	}
	return p, fp + ".qcow2", nil
}

// brokenImages fails every lookup with an error that is not "not found".
type brokenImages struct{}

func (brokenImages) ImageFile(context.Context, string) (string, string, error) {
	return "", "", errors.New("store unavailable")
}

const (
	fpKnown   = "5e3ec5c4e7d53ff9b1ab8e4b1ea2e0a3d1bf1a9fbd1e6a8a8a9f0d7e1c2b3a4f"
	fpUnknown = "0000000000000000000000000000000000000000000000000000000000000000"
)

func TestImageExport(t *testing.T) {
	dir := t.TempDir()
	content := "QFI\xfb image bytes\n"
	if err := os.WriteFile(filepath.Join(dir, fpKnown), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		images  ImageStore
		enabled string // security.devlxd.images of instance a ("" unset)
		path    string
		want    answer
		disp    string
	}{
		{"not enabled", dirImages(dir), "", "/1.0/images/" + fpKnown + "/export", fail(403, "Forbidden"), ""},
		{"disabled", dirImages(dir), "false", "/1.0/images/" + fpKnown + "/export", fail(403, "Forbidden"), ""},
		{"served", dirImages(dir), "true", "/1.0/images/" + fpKnown + "/export", answer{200, "application/octet-stream", content}, "inline;filename=" + fpKnown + ".qcow2"},
		{"default project", dirImages(dir), "true", "/1.0/images/" + fpKnown + "/export?project=default", answer{200, "application/octet-stream", content}, "inline;filename=" + fpKnown + ".qcow2"},
		{"other project", dirImages(dir), "true", "/1.0/images/" + fpKnown + "/export?project=p2", fail(404, "Not Found"), ""},
		{"unknown", dirImages(dir), "true", "/1.0/images/" + fpUnknown + "/export", fail(404, "Not Found"), ""},
		{"prefix only", dirImages(dir), "true", "/1.0/images/" + fpKnown[:12] + "/export", fail(404, "Not Found"), ""},
		{"upper case", dirImages(dir), "true", "/1.0/images/" + "5E3EC5C4E7D53FF9B1AB8E4B1EA2E0A3D1BF1A9FBD1E6A8A8A9F0D7E1C2B3A4F" + "/export", fail(404, "Not Found"), ""},
		{"traversal", dirImages(dir), "true", "/1.0/images/..%2f..%2fetc%2fpasswd/export", fail(404, "Not Found"), ""},
		{"no store", nil, "true", "/1.0/images/" + fpKnown + "/export", fail(404, "Not Found"), ""},
		{"store fails", brokenImages{}, "true", "/1.0/images/" + fpKnown + "/export", fail(500, "Internal Server Error"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.Images = tt.images })
			if tt.enabled != "" {
				e.insts.setConfig(uuidA, "security.devlxd.images", tt.enabled)
			}
			c := e.client(uuidA, e.agents["a"])
			req, err := http.NewRequest("GET", "https://lxd"+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			got := answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}
			if got != tt.want {
				t.Fatalf("GET %s:\n got %+v\nwant %+v", tt.path, got, tt.want)
			}
			// LXD's API errors carry nosniff (the agent relays it).
			if n := resp.Header.Get("X-Content-Type-Options"); tt.want.status != 200 && n != "nosniff" {
				t.Errorf("X-Content-Type-Options %q on a %d, want nosniff", n, tt.want.status)
			}
			if d := resp.Header.Get("Content-Disposition"); d != tt.disp {
				t.Errorf("Content-Disposition %q, want %q", d, tt.disp)
			}
			if tt.want.status == 200 {
				if l := resp.Header.Get("Content-Length"); l != fmt.Sprint(len(content)) {
					t.Errorf("Content-Length %q, want %d", l, len(content))
				}
				if resp.Header.Get("Last-Modified") == "" {
					t.Error("no Last-Modified")
				}
			}
		})
	}
}

// fixedTypes says every backend's guests are of one type.
type fixedTypes string

func (f fixedTypes) InstanceType(string) string { return string(f) }

func TestInstanceType(t *testing.T) {
	for _, tt := range []struct {
		name  string
		types InstanceTypes
		want  string
	}{
		{"default", nil, "virtual-machine"},
		{"container", fixedTypes("container"), "container"},
		{"vm", fixedTypes("virtual-machine"), "virtual-machine"},
		{"unknown is vm", fixedTypes("zone"), "virtual-machine"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.InstanceTypes = tt.types })
			want := sync200(`{"state":"Started","api_version":"1.0","instance_type":"` + tt.want + `","location":"host1","auth":"untrusted","supported_storage_drivers":[]}`)
			if got := do(t, e.client(uuidA, e.agents["a"]), "GET", "/1.0", ""); got != want {
				t.Fatalf("GET /1.0 = %+v, want %+v", got, want)
			}
		})
	}
}

// switchTypes answers the type its backend name asks for.
type switchTypes struct{}

func (switchTypes) InstanceType(backend string) string {
	if backend == "ct" {
		return "container"
	}
	return "virtual-machine"
}

// GET /1.0 answers from envelopes encoded once per state and type: they
// follow the ready flag both ways and the backend's type, per instance.
func TestInfoFollowsReadyAndType(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.InstanceTypes = switchTypes{} })
	a := e.client(uuidA, e.agents["a"])
	b := e.client(uuidB, e.agents["b"])
	info := func(state, typ string) answer {
		return sync200(`{"state":"` + state + `","api_version":"1.0","instance_type":"` + typ + `","location":"host1","auth":"untrusted","supported_storage_drivers":[]}`)
	}
	check := func(c *http.Client, want answer) {
		t.Helper()
		if got := do(t, c, "GET", "/1.0", ""); got != want {
			t.Fatalf("GET /1.0 = %+v, want %+v", got, want)
		}
	}
	check(a, info("Started", "virtual-machine"))
	check(b, info("Ready", "virtual-machine"))
	e.insts.setConfig(uuidA, "volatile.last_state.ready", "true")
	e.insts.setConfig(uuidB, "volatile.last_state.ready", "false")
	check(a, info("Ready", "virtual-machine"))
	check(b, info("Started", "virtual-machine"))
	e.insts.mu.Lock()
	e.insts.byID[uuidB].Backend = "ct"
	e.insts.mu.Unlock()
	check(b, info("Started", "container"))
	check(a, info("Ready", "virtual-machine"))
	e.insts.setConfig(uuidB, "volatile.last_state.ready", "true")
	check(b, info("Ready", "container"))
}
