package qemuvm

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestQEMUEnvironment starts QEMU with a canary and a CLI's
// GUESTLINK_CONFIG_DIR in the plugin's (this test's) environment: QEMU's
// own environment, read from /proc, must be VMMEnv and nothing else.
func TestQEMUEnvironment(t *testing.T) {
	t.Setenv("GUESTLINK_TEST_CANARY", "from-the-host")
	t.Setenv("GUESTLINK_CONFIG_DIR", "/nonexistent/cli-config")
	e := newBootEnv(t, LayoutCurrent, "")
	st := e.start(t, false)
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", st.PID))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00"); !slices.Equal(got, VMMEnv()) {
		t.Errorf("QEMU's environment = %q, want %q", got, VMMEnv())
	}
}
