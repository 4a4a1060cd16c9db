package agent_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports keeps the agent and the shared link packages small: they must
// never depend on the daemon, the store, the web UI or their libraries.
func TestImports(t *testing.T) {
	forbidden := []string{
		"github.com/guestlink/guestlink/core",
		"github.com/guestlink/guestlink/db",
		"github.com/guestlink/guestlink/web",
		"github.com/gofiber/",
		"github.com/valyala/fasthttp",
		"gorm.io/",
		"github.com/a-h/templ",
		"github.com/spf13/cobra",
	}
	pkgs := []string{
		"github.com/guestlink/guestlink/cmd/guestlink-agent",
		"github.com/guestlink/guestlink/agent/...",
		"github.com/guestlink/guestlink/link/...",
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
				t.Errorf("agent/link dependency %s is forbidden (%s)", dep, f)
			}
		}
	}
}
