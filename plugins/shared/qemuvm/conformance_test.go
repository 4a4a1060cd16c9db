package qemuvm

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testbin"

	"github.com/guestlink/guestlink/internal/testenv"
	"github.com/guestlink/guestlink/link/ringproto"
	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sdk/conformance"
	"github.com/guestlink/guestlink/plugins/shared/qemuvm/qemutest"
)

// buildPlugin puts the plugin main at pkg (an import path) into dir
// (internal/testbin: built once per content).
func buildPlugin(t *testing.T, pkg, dir string) string {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(pkg))
	if err := testbin.Install(pkg, out); err != nil {
		t.Fatal(err)
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
				Capabilities: []sdk.Capability{sdk.CapStateful, sdk.CapLinkSerial, sdk.CapRingBuffer, sdk.CapRecover, sdk.CapSnapshot, sdk.CapSnapshotStateful, sdk.CapMove, sdk.CapHotplug, sdk.CapDisk, sdk.CapNICUser, sdk.CapLinkVsock},
				Launch:       sdk.LaunchOptions{Env: []string{EnvDir + "=" + shortTempDir(t)}},
			})
		})
	}
}

// TestPluginReadsStarted boots the guest through the qemu plugin binary (a
// real plugin process, as the daemon runs it) and reads the agent's STARTED
// through the plugin's ReadRing.
func TestPluginReadsStarted(t *testing.T) {
	img := qemutest.RequiresQEMU(t)
	if !img.HasAgent {
		testenv.Requires(t, "the guest image with the agent", "cmd/guestlink-agent was missing when make guest-image ran: run make build guest-image")
	}
	bin := buildPlugin(t, "github.com/guestlink/guestlink/plugins/qemu", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client, err := sdk.Launch(ctx, bin, sdk.LaunchOptions{Env: []string{EnvDir + "=" + shortTempDir(t)}})
	if err != nil {
		t.Fatalf("launching the qemu plugin: %v", err)
	}
	defer client.Kill()
	b := client.Backend()
	spec := &sdk.GuestSpec{Name: "plugin1", UUID: newUUID(), Files: agentFiles(t), Config: map[string]string{
		KeyKernel: img.Kernel, KeyInitrd: img.Initrd, KeyAccel: AccelTCG,
	}}
	h, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	h, st, err := b.Start(ctx, h, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer b.Stop(context.Background(), h, sdk.StopOptions{Force: true})
	if st.Details["accel"] != AccelTCG || st.Details["layout"] != string(LayoutCurrent) {
		t.Errorf("state details = %v", st.Details)
	}
	var p ringproto.Parser
	for {
		data, err := b.ReadRing(ctx, h, 4096)
		if err != nil {
			t.Fatalf("ReadRing: %v", err)
		}
		if w, ok := p.Feed(data); ok && w == ringproto.Started {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("no STARTED through the plugin's ReadRing")
		case <-time.After(200 * time.Millisecond):
		}
	}
	if _, err := b.Stop(ctx, h, sdk.StopOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, h); err != nil {
		t.Fatal(err)
	}
}
