package protocheck

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the repository root, seen from this package's directory.
const repoRoot = "../.."

// protoPath is the contract's path inside the buf module (the repository).
const protoPath = "plugins/sdk/proto/backend/v1/backend.proto"

// baseline is the released descriptor set make check-proto compares with.
const baseline = "plugins/sdk/proto/backend/v1/backend.v0.binpb"

// buf runs the repository's pinned buf (tools/go.mod) in the repository
// root and returns its combined output and whether it succeeded.
func buf(t *testing.T, args ...string) (string, bool) {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"tool", "-modfile=tools/go.mod", "buf"}, args...)...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("running buf %v: %v", args, err)
		}
	}
	return out.String(), err == nil
}

// copyModule writes a buf module to a temporary directory: the
// repository's buf.yaml and the contract with edit applied, at the same
// path so buf breaking compares the same file.
func copyModule(t *testing.T, edit func(string) string) string {
	t.Helper()
	dir := t.TempDir()
	conf, err := os.ReadFile(filepath.Join(repoRoot, "buf.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(repoRoot, protoPath))
	if err != nil {
		t.Fatal(err)
	}
	edited := edit(string(src))
	if err := os.WriteFile(filepath.Join(dir, "buf.yaml"), conf, 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, filepath.FromSlash(protoPath))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// replaceOnce replaces old by new in s and fails the test if old is not
// there exactly once (the proto changed under the test).
func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	if n := strings.Count(s, old); n != 1 {
		t.Fatalf("the contract holds %q %d times, want once: update the test", old, n)
	}
	return strings.Replace(s, old, new, 1)
}

// TestContractPassesGate runs what make check-proto runs on the
// repository's proto: it must lint clean and not break the release.
func TestContractPassesGate(t *testing.T) {
	if out, ok := buf(t, "lint"); !ok {
		t.Fatalf("buf lint fails on the contract:\n%s", out)
	}
	if out, ok := buf(t, "breaking", "--against", baseline); !ok {
		t.Fatalf("buf breaking fails against the released contract %s:\n%s", baseline, out)
	}
}

// TestBreakingCatchesWireBreaks feeds buf breaking edited copies of the
// contract: each wire break must fail naming what broke, and an additive
// change (a new field with a new number) must pass, so the gate is not one
// that always fails.
func TestBreakingCatchesWireBreaks(t *testing.T) {
	tests := []struct {
		name     string
		old, new string
		want     string // "" means buf breaking must pass; else a word of its report
	}{
		{"renumbered field", "string version = 2;", "string version = 21;", "version"},
		{"retyped field", "int64 timeout_ms = 2;", "int32 timeout_ms = 2;", "timeout_ms"},
		{"removed rpc", "  rpc State(StateRequest) returns (StateResponse);\n", "", "State"},
		{"renamed service", "service Backend {", "service BackendService {", "Backend"},
		{"added field", "string version = 2;", "string version = 2;\n  string added_by_test = 999;", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyModule(t, func(s string) string { return replaceOnce(t, s, tt.old, tt.new) })
			out, ok := buf(t, "breaking", dir, "--against", baseline)
			switch {
			case tt.want == "" && !ok:
				t.Fatalf("buf breaking refused an additive change (%q -> %q):\n%s", tt.old, tt.new, out)
			case tt.want != "" && ok:
				t.Fatalf("buf breaking passed a wire break (%q -> %q):\n%s", tt.old, tt.new, out)
			case tt.want != "" && !strings.Contains(out, tt.want):
				t.Fatalf("buf breaking failed without naming %q:\n%s", tt.want, out)
			}
		})
	}
}
