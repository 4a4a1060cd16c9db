package testwait

import (
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testproc"
)

func TestUntil(t *testing.T) {
	tests := []struct {
		name  string
		after int32 // cond holds from this call on; 0: never
		want  bool
	}{
		{"at once", 1, true},
		{"after some polls", 5, true},
		{"never", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int32
			got := Until(200*time.Millisecond, func() bool {
				n := calls.Add(1)
				return tt.after != 0 && n >= tt.after
			})
			if got != tt.want {
				t.Fatalf("Until = %v after %d calls, want %v", got, calls.Load(), tt.want)
			}
		})
	}
}

func TestProcessExit(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "read x") // ends when stdin closes
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	testproc.Start(t, cmd)
	pid := cmd.Process.Pid
	if err := ProcessExit(pid, 50*time.Millisecond); err == nil {
		t.Fatal("ProcessExit returned while the process runs")
	}
	stdin.Close()
	if err := ProcessExit(pid, time.Minute); err != nil {
		t.Fatalf("ProcessExit after the process ended: %v", err)
	}
}
