package sdk_test

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// TestLaunchBrokenBinaries launches real binaries that are not working
// plugins, from a temporary directory, and checks that the error says what
// the process did, its last stderr lines, the path and what to check,
// instead of go-plugin's "Unrecognized remote plugin message: Failed to read
// any lines from plugin's stdout" (what the scripts below got before).
// Tried: a script that exits 1 with a message, one that prints garbage to
// stdout, one that kills itself with SIGTERM, one that exits 0 saying
// nothing, a file that is not a program (exec format error) and /bin/true's
// ELF patched to claim another architecture.
func TestLaunchBrokenBinaries(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notProgram := filepath.Join(dir, "not-a-program")
	if err := os.WriteFile(notProgram, []byte("this is no program\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	hint := fmt.Sprintf("is it a guestlink plugin built for this machine (%s/%s)?", runtime.GOOS, runtime.GOARCH)
	tests := []struct {
		name string
		path string
		want []string // all in the message
		not  []string // none in the message
	}{
		{
			name: "exits 1 with a message",
			path: script("exit1", `echo "broken: cannot find libfoo.so" >&2; exit 1`),
			want: []string{"it exited with status 1 before the plugin handshake", "(plugin stderr: broken: cannot find libfoo.so)", hint},
		},
		{
			name: "prints garbage",
			path: script("garbage", `echo "something else" >&2; echo "hello, I am not a plugin"; exec sleep 60`),
			want: []string{`it wrote "hello, I am not a plugin" to stdout instead of the plugin handshake`, "(plugin stderr: something else)", hint},
			not:  []string{"killed"}, // go-plugin killed it, it did not die on its own
		},
		{
			name: "killed by a signal",
			path: script("signal", `echo "about to die" >&2; kill -TERM $$`),
			want: []string{"it was killed by signal 15 (terminated) before the plugin handshake", "(plugin stderr: about to die)", hint},
		},
		{
			name: "exits 0 silently",
			path: script("silent", `exit 0`),
			want: []string{"it exited with status 0 before the plugin handshake", hint},
			not:  []string{"stderr"},
		},
		{
			name: "not a program",
			path: notProgram,
			want: []string{"it cannot be run: exec format error", hint},
		},
	}
	if want, ok := foreignELF(t, dir); ok {
		tests = append(tests, struct {
			name string
			path string
			want []string
			not  []string
		}{name: "another architecture", path: filepath.Join(dir, "foreign"), want: []string{"it cannot be run: exec format error", hint, "It is an ELF binary for EM_S390, this machine needs " + want.String()}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := sdk.Launch(context.Background(), tt.path, sdk.LaunchOptions{})
			if err == nil {
				c.Kill()
				t.Fatal("Launch succeeded")
			}
			msg := err.Error()
			for _, w := range append(tt.want, fmt.Sprintf("starting plugin %q: ", tt.path)) {
				if !strings.Contains(msg, w) {
					t.Errorf("Launch error %q\n does not say %q", msg, w)
				}
			}
			for _, n := range append(tt.not, "Failed to read any lines", "Unrecognized remote plugin message") {
				if strings.Contains(msg, n) {
					t.Errorf("Launch error %q\n says %q", msg, n)
				}
			}
		})
	}
}

// foreignELF writes dir/foreign, /bin/true with its ELF header's machine
// changed to EM_S390 (another architecture than this test's), and returns
// the machine this one runs; false where /bin/true is not an ELF binary of
// this machine.
func foreignELF(t *testing.T, dir string) (elf.Machine, bool) {
	t.Helper()
	f, err := elf.Open("/bin/true")
	if err != nil || f.Machine == elf.EM_S390 || f.ByteOrder != binary.LittleEndian {
		return 0, false
	}
	machine := f.Machine
	f.Close()
	data, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint16(data[18:], uint16(elf.EM_S390)) // e_machine
	if err := os.WriteFile(filepath.Join(dir, "foreign"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	return machine, true
}
