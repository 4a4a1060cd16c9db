package example_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sdk/conformance"
	"github.com/guestlink/guestlink/plugins/sdk/internal/agentbin"
)

// readyCommand is a guest that runs the agent and declares Ready once the
// agent reaches the daemon (the kit).
const readyCommand = `"$GUESTLINK_AGENT" run & "$GUESTLINK_AGENT" wait-host --timeout 60s && "$GUESTLINK_AGENT" ready; wait`

// TestConformance builds the example plugin, as an author builds theirs,
// and runs it through the SDK's conformance kit as a real child process,
// with the real guestlink-agent in the Agent subtest's guest.
func TestConformance(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "example")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/example")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("building the example plugin: %v", err)
	}
	agent, err := agentbin.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	conformance.Run(t, conformance.Config{
		AgentSpec: func(name, uuid string) *sdk.GuestSpec {
			return &sdk.GuestSpec{Name: name, UUID: uuid, Config: map[string]string{"example.command": readyCommand}}
		},
		Agent:      agent,
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
