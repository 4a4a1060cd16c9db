package qemuvm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testproc"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// startVictim starts a real process of this user whose command line holds
// "-c" and the pair "-uuid <uuid>", like a QEMU would, and returns its pid
// once the exec has happened: until then /proc/PID/cmdline is the test
// binary's (or empty), so the shell says when it runs. The shell and its
// sleep form their own process group, killed when the test ends.
func startVictim(t *testing.T, uuid string) int {
	t.Helper()
	// "; :" keeps the shell from exec'ing sleep, so the shell stays the pid.
	cmd := exec.Command("/bin/sh", "-c", "echo ready; sleep 120; :", "-uuid", uuid)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	testproc.Start(t, cmd)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("waiting for the victim shell: %q, %v", line, err)
	}
	return cmd.Process.Pid
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	_, ok := procStartTime(pid)
	return ok
}

func TestProcessMatches(t *testing.T) {
	u := newUUID()
	pid := startVictim(t, u)
	start, ok := procStartTime(pid)
	if !ok || start == 0 {
		t.Fatalf("no start time for pid %d", pid)
	}
	tests := []struct {
		name  string
		start uint64
		uuid  string
		want  bool
	}{
		{"exact pair", start, u, true},
		{"zero start time", 0, u, false},
		{"other start time", start + 1, u, false},
		{"any argument", start, "-c", false},
		{"option as uuid", start, "-uuid", false},
		{"other uuid", start, newUUID(), false},
		{"empty uuid", start, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := processMatches(pid, tt.start, tt.uuid); got != tt.want {
				t.Fatalf("processMatches(%d, %d, %q) = %v, want %v", pid, tt.start, tt.uuid, got, tt.want)
			}
		})
	}
}

// TestCraftedHandleSparesProcesses checks that handles naming a process that
// is not this backend's QEMU (the reviewer's {"uuid":"-c",...} among them)
// are refused or treated as stopped, and the process is never signalled.
func TestCraftedHandleSparesProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := shortTempDir(t)
	b, err := New(Options{Name: "qemu-test", Layout: LayoutCurrent, Dir: dir, Host: &HostCaps{}})
	if err != nil {
		t.Fatal(err)
	}
	u := newUUID()
	victim := startVictim(t, u)
	start, ok := procStartTime(victim)
	if !ok {
		t.Fatalf("victim %d is gone", victim)
	}
	other := shortTempDir(t)
	tests := []struct {
		name    string
		raw     string
		invalid bool
	}{
		{"uuid an option", fmt.Sprintf(`{"v":1,"uuid":"-c","dir":"/x/-c","layout":%q,"pid":%d}`, LayoutCurrent, victim), true},
		{"dir outside the guests dir", fmt.Sprintf(`{"v":1,"uuid":%q,"dir":%q,"layout":%q,"pid":%d,"start_time":%d}`,
			u, filepath.Join(other, u), LayoutCurrent, victim, start), true},
		{"no start time", fmt.Sprintf(`{"v":1,"uuid":%q,"dir":%q,"layout":%q,"pid":%d}`,
			u, filepath.Join(dir, u), LayoutCurrent, victim), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.Stop(ctx, sdk.Handle(tt.raw), sdk.StopOptions{Force: true})
			if tt.invalid != errors.Is(err, sdk.ErrInvalid) {
				t.Errorf("Stop = %v, want ErrInvalid: %v", err, tt.invalid)
			}
			if !tt.invalid && err != nil {
				t.Errorf("Stop = %v, want the guest reported stopped", err)
			}
			if !alive(victim) {
				t.Fatalf("Stop(%s) killed process %d", tt.raw, victim)
			}
			if err := syscall.Kill(victim, 0); err != nil {
				t.Fatalf("process %d: %v", victim, err)
			}
		})
	}
}

// TestDeleteChecksMarker checks that Delete removes a guest directory only
// when its marker names the handle's guest.
func TestDeleteChecksMarker(t *testing.T) {
	ctx := context.Background()
	b, err := New(Options{Name: "qemu-test", Layout: LayoutCurrent, Dir: shortTempDir(t), Host: &HostCaps{}})
	if err != nil {
		t.Fatal(err)
	}
	kernel := filepath.Join(t.TempDir(), "vmlinuz")
	if err := os.WriteFile(kernel, []byte("not a kernel"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		marker func(uuid string) string // nil keeps the one Create wrote
		gone   bool
	}{
		{"own marker", nil, true},
		{"marker of another guest", func(string) string { return newUUID() + "\n" }, false},
		{"marker with a name", func(string) string { return "web1\n" }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUUID()
			h, err := b.Create(ctx, &sdk.GuestSpec{Name: "g", UUID: u, Config: map[string]string{KeyKernel: kernel}})
			if err != nil {
				t.Fatal(err)
			}
			gdir := filepath.Join(b.opts.Dir, u)
			if tt.marker != nil {
				if err := os.WriteFile(filepath.Join(gdir, markerFile), []byte(tt.marker(u)), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			err = b.Delete(ctx, h)
			_, statErr := os.Stat(gdir)
			if gone := errors.Is(statErr, os.ErrNotExist); gone != tt.gone {
				t.Fatalf("Delete = %v; directory gone = %v, want %v", err, gone, tt.gone)
			}
			if tt.gone != (err == nil) || (err != nil && !errors.Is(err, sdk.ErrInvalid)) {
				t.Fatalf("Delete = %v, want ok=%v (ErrInvalid otherwise)", err, tt.gone)
			}
		})
	}
}
