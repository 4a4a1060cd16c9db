package conformance_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sdk/conformance"
	"github.com/guestlink/guestlink/plugins/sdk/internal/agentbin"
)

// pluginBin is the SDK's misbehaving test plugin, built by TestMain. The
// kit passing a well-behaved plugin is shown by plugins/sdk/example's test.
var pluginBin string

// agentBin is guestlink-agent, built by TestMain for the Agent subtest.
var agentBin string

func TestMain(m *testing.M) {
	if bin := os.Getenv("CONFORMANCE_TEST_PLUGIN"); bin != "" {
		pluginBin = bin // the broken-plugin run of TestKitFailsBrokenPlugin
		agentBin = os.Getenv("CONFORMANCE_TEST_AGENT")
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "conformance-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pluginBin = filepath.Join(dir, "misbehaving")
	cmd := exec.Command("go", "build", "-o", pluginBin, "github.com/guestlink/guestlink/plugins/sdk/internal/misbehaving")
	cmd.Stderr = os.Stderr
	code := 1
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building test plugin:", err)
	} else if agentBin, err = agentbin.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

func config(path string) conformance.Config {
	return conformance.Config{
		PluginPath: path,
		Spec: func(name, uuid string) *sdk.GuestSpec {
			return &sdk.GuestSpec{Name: name, UUID: uuid, Config: map[string]string{"example.command": "exec sleep 3600"}}
		},
		ExitingSpec: func(name, uuid string) *sdk.GuestSpec {
			return &sdk.GuestSpec{Name: name, UUID: uuid, Config: map[string]string{"example.command": "sleep 0.2"}}
		},
		AgentSpec: func(name, uuid string) *sdk.GuestSpec {
			return &sdk.GuestSpec{Name: name, UUID: uuid, Config: map[string]string{"example.command": readyCommand}}
		},
		Agent:        agentBin,
		Timeout:      30 * time.Second,
		Capabilities: []sdk.Capability{sdk.CapRecover, sdk.CapLinkHybrid},
	}
}

// readyCommand is a guest that runs the agent and declares Ready once the
// agent reaches the daemon (the kit).
const readyCommand = `"$GUESTLINK_AGENT" run & "$GUESTLINK_AGENT" wait-host --timeout 60s && "$GUESTLINK_AGENT" ready; wait`

// TestConformance runs the kit against the misbehaving plugin without a
// behaviour file: it behaves, and must pass.
func TestConformance(t *testing.T) {
	if os.Getenv("CONFORMANCE_TEST_PLUGIN") != "" {
		t.Skip("broken-plugin run")
	}
	conformance.Run(t, config(pluginBin))
}

// TestBrokenPlugin is run by TestKitFailsBrokenPlugin in a child process,
// against a plugin that crashes in LinkEndpoint.
func TestBrokenPlugin(t *testing.T) {
	if os.Getenv("CONFORMANCE_TEST_PLUGIN") == "" {
		t.Skip("only run by TestKitFailsBrokenPlugin")
	}
	conformance.Run(t, config(pluginBin))
}

// TestKitFailsBrokenPlugin checks that the kit can fail: a plugin that
// crashes in LinkEndpoint must fail the Lifecycle subtest.
func TestKitFailsBrokenPlugin(t *testing.T) {
	if os.Getenv("CONFORMANCE_TEST_PLUGIN") != "" {
		t.Skip("broken-plugin run")
	}
	dir, bdir := t.TempDir(), t.TempDir()
	broken := filepath.Join(dir, "broken")
	if err := os.Link(pluginBin, broken); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bdir, "broken.json"), []byte(`{"crash_on":"LinkEndpoint"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenPlugin$", "-test.v")
	cmd.Env = append(os.Environ(), "CONFORMANCE_TEST_PLUGIN="+broken, "CONFORMANCE_TEST_AGENT="+agentBin, "MISBEHAVING_BEHAVIOUR_DIR="+bdir)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the kit passed a plugin that crashes in LinkEndpoint:\n%s", out)
	}
	if !strings.Contains(string(out), "--- FAIL: TestBrokenPlugin/Lifecycle") {
		t.Fatalf("Lifecycle did not fail:\n%s", out)
	}
}
