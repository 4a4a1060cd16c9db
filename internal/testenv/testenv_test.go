package testenv

import (
	"runtime"
	"testing"
)

// recorder is a testing.TB that records how Requires ended the test.
type recorder struct {
	testing.TB
	ended string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(string, ...any) { r.ended = "fatal"; runtime.Goexit() }

func (r *recorder) Skipf(string, ...any) { r.ended = "skip"; runtime.Goexit() }

func TestRequires(t *testing.T) {
	tests := []struct {
		ci   string
		want string
	}{
		{"", "skip"},
		{"false", "skip"},
		{"nonsense", "skip"},
		{"true", "fatal"},
		{"1", "fatal"},
	}
	for _, tt := range tests {
		t.Run("CI="+tt.ci, func(t *testing.T) {
			t.Setenv(EnvCI, tt.ci)
			r := &recorder{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				Requires(r, "qemu-system-x86_64", "not installed")
			}()
			<-done
			if r.ended != tt.want {
				t.Fatalf("Requires with CI=%q ended the test with %q, want %q", tt.ci, r.ended, tt.want)
			}
		})
	}
}
