package sdk_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports keeps the SDK small for plugin authors: it must not pull in
// the daemon or its web and database stacks.
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/guestlink/guestlink/plugins/sdk/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	forbidden := []string{
		"github.com/guestlink/guestlink/core/",
		"github.com/guestlink/guestlink/db",
		"github.com/guestlink/guestlink/web",
		"github.com/gofiber/",
		"gorm.io/",
		"github.com/a-h/templ",
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.HasPrefix(pkg, f) {
				t.Errorf("plugins/sdk depends on %s", pkg)
			}
		}
	}
}
