package qemuvm

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/guestlink/guestlink/plugins/qemuvm/qemutest"
	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sdk/conformance"
)

// buildPlugin builds the plugin main at pkg into dir.
func buildPlugin(t *testing.T, pkg, dir string) string {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, b)
	}
	return out
}

// TestConformance runs the plugin test kit against both QEMU plugin
// binaries, one guest at a time.
func TestConformance(t *testing.T) {
	img := qemutest.RequiresQEMU(t)
	if testing.Short() {
		t.Skip("boots many QEMU guests; skipped with -short")
	}
	bins := t.TempDir()
	for _, p := range []struct{ name, pkg string }{
		{"qemu", "github.com/guestlink/guestlink/plugins/qemu"},
		{"qemu-legacy", "github.com/guestlink/guestlink/plugins/qemu-legacy"},
	} {
		t.Run(p.name, func(t *testing.T) {
			bin := buildPlugin(t, p.pkg, bins)
			files := agentFiles(t)
			spec := func(append string) func(name, uuid string) *sdk.GuestSpec {
				return func(name, uuid string) *sdk.GuestSpec {
					return &sdk.GuestSpec{Name: name, UUID: uuid, Files: files, Config: map[string]string{
						KeyKernel: img.Kernel, KeyInitrd: img.Initrd, KeyAccel: AccelTCG, KeyAppend: append,
					}}
				}
			}
			conformance.Run(t, conformance.Config{
				PluginPath:   bin,
				Spec:         spec(""),
				ExitingSpec:  spec("guestlink.poweroff=2"),
				Timeout:      2 * time.Minute,
				Capabilities: []sdk.Capability{sdk.CapStateful, sdk.CapLinkSerial, sdk.CapRingBuffer, sdk.CapRecover},
				Launch:       sdk.LaunchOptions{Env: []string{EnvDir + "=" + shortTempDir(t)}},
			})
		})
	}
}
