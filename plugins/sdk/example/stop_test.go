package example

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// TestStopEndsTheWholeGroup: a guest whose shell dies of the stop's
// SIGTERM while a process it started ignores SIGTERM (a subshell that
// traps it, then execs sleep) is reported stopped only with that process
// gone too. Before, Stop watched the shell alone and left the sleep
// running: a guest reported stopped whose process lived on.
func TestStopEndsTheWholeGroup(t *testing.T) {
	t.Setenv(sdk.DataDirEnv, t.TempDir())
	b := New("")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The subshell writes its PID (the sleep's, after exec) before the
	// shell waits; the test reads it from the guest's root.
	const cmd = `(trap '' TERM; echo $(exec sh -c 'echo $PPID') > survivor.pid; exec sleep 3600) & wait`
	for _, force := range []bool{false, true} {
		t.Run("force="+strconv.FormatBool(force), func(t *testing.T) {
			uuid := "9d0f3c2e-0000-4000-8000-00000000000" + map[bool]string{false: "1", true: "2"}[force]
			spec := &sdk.GuestSpec{Name: "g", UUID: uuid, Config: map[string]string{"example.command": cmd}}
			h, err := b.Create(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			h, st, err := b.Start(ctx, h, spec)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = syscall.Kill(-int(st.PID), syscall.SIGKILL) })
			pidFile := guestPaths(uuid).root() + "/survivor.pid"
			var survivor int
			deadline := time.Now().Add(30 * time.Second)
			for survivor == 0 {
				if data, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(data), "\n") {
					survivor, _ = strconv.Atoi(strings.TrimSpace(string(data)))
				} else if time.Now().After(deadline) {
					t.Fatalf("the guest never wrote %s", pidFile)
				} else {
					time.Sleep(10 * time.Millisecond) // polling a file the guest writes
				}
			}
			if err := syscall.Kill(survivor, 0); err != nil {
				t.Fatalf("the subshell's process %d: %v", survivor, err)
			}
			got, err := b.Stop(ctx, h, sdk.StopOptions{Force: force, Timeout: 20 * time.Second})
			if err != nil || got.Status != sdk.StatusStopped {
				t.Fatalf("Stop = %+v, %v", got, err)
			}
			if alive(survivor) {
				t.Fatalf("Stop reported the guest stopped; its process %d (TERM ignored) still runs", survivor)
			}
			if err := b.Delete(ctx, h); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(data), ')')
	return i > 0 && !strings.HasPrefix(strings.TrimSpace(string(data[i+1:])), "Z")
}
