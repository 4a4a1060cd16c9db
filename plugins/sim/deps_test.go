package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports keeps the sim plugin, its VMM and the ring buffer free of the
// daemon, the store, the web UI and their libraries: plugins depend on the
// SDK only.
func TestImports(t *testing.T) {
	forbidden := []string{
		"github.com/guestlink/guestlink/core",
		"github.com/guestlink/guestlink/db",
		"github.com/guestlink/guestlink/web",
		"github.com/guestlink/guestlink/agent",
		"github.com/gofiber/",
		"github.com/valyala/fasthttp",
		"gorm.io/",
		"github.com/a-h/templ",
		"github.com/spf13/cobra",
	}
	pkgs := []string{
		"github.com/guestlink/guestlink/plugins/sim/...",
		"github.com/guestlink/guestlink/plugins/shared/ringbuffer",
	}
	out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list returned only %d packages: %q", len(deps), deps)
	}
	for _, dep := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f) {
				t.Errorf("sim dependency %s is forbidden (%s)", dep, f)
			}
		}
	}
}
