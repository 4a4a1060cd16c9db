package sdk_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports keeps the SDK small for plugin authors: it is a module of its
// own and must import nothing of the daemon's module (core, db, web, the
// backends and their shared libraries) nor the web and database stacks.
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-test", "github.com/guestlink/guestlink/plugins/sdk/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []string{
		"github.com/guestlink/guestlink/", // the root module, except the SDK itself (below)
		"github.com/gofiber/",
		"gorm.io/",
		"github.com/a-h/templ",
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/guestlink/guestlink/plugins/sdk") {
			continue
		}
		for _, f := range forbidden {
			if strings.HasPrefix(pkg, f) {
				t.Errorf("plugins/sdk depends on %s", pkg)
			}
		}
	}
}
