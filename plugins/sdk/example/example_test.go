package example_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sdk/conformance"
)

// TestConformance builds the example plugin, as an author builds theirs,
// and runs it through the SDK's conformance kit as a real child process.
func TestConformance(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "example")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/example")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("building the example plugin: %v", err)
	}
	conformance.Run(t, conformance.Config{
		PluginPath: bin,
		Spec: func(name, uuid string) *sdk.GuestSpec {
			return &sdk.GuestSpec{Name: name, UUID: uuid, Config: map[string]string{"example.command": "sleep 3600"}}
		},
		ExitingSpec: func(name, uuid string) *sdk.GuestSpec {
			return &sdk.GuestSpec{Name: name, UUID: uuid, Config: map[string]string{"example.command": "sleep 0.2"}}
		},
		Timeout:      30 * time.Second,
		Capabilities: []sdk.Capability{sdk.CapRecover, sdk.CapLinkHybrid},
	})
}
