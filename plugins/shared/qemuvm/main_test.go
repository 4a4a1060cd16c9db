package qemuvm

import (
	"os"
	"testing"
)

// TestMain lets the test binary stand in for the plugin binary when a
// guest with qemu.vsock=user starts its vsock device (os.Executable()
// re-executed with VsockdCommand).
func TestMain(m *testing.M) {
	MaybeRunVsockd()
	os.Exit(m.Run())
}
