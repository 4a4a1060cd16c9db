package testbin

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFromEnv checks that GUESTLINK_BIN is read with make build's layout
// and that a binary it lacks is built instead.
func TestFromEnv(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"guestlinkd", "plugins/sim"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(Env, dir)
	for _, tt := range []struct {
		pkg, want string
	}{
		{Daemon, filepath.Join(dir, "guestlinkd")},
		{Sim, filepath.Join(dir, "plugins/sim")},
		{CLI, ""},
		{Module + "/plugins/sdk/internal/misbehaving", ""},
		{"example.com/other/cmd/guestlinkd", ""},
	} {
		if got := fromEnv(tt.pkg); got != tt.want {
			t.Errorf("fromEnv(%s) = %q, want %q", tt.pkg, got, tt.want)
		}
	}
}

// TestPath builds the agent once and checks that the key is stable, that a
// second Path reuses the build and that Install copies it elsewhere.
func TestPath(t *testing.T) {
	t.Setenv(Env, "")
	k1, err := contentKey(Agent)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := contentKey(Agent)
	if err != nil || k1 != k2 || len(k1) != 32 {
		t.Fatalf("contentKey = %q, %q (%v), want the same 32 hex digits", k1, k2, err)
	}
	if k3, err := contentKey(CLI); err != nil || k3 == k1 {
		t.Fatalf("contentKey(CLI) = %q (%v), want another key than the agent's", k3, err)
	}
	p, err := Path(Agent)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(p) != "guestlink-agent-"+k1 {
		t.Fatalf("Path = %s, want a file named for key %s", p, k1)
	}
	if again, err := Path(Agent); err != nil || again != p {
		t.Fatalf("second Path = %s (%v), want %s", again, err, p)
	}
	dst := filepath.Join(t.TempDir(), "bin", "guestlink-agent")
	if err := Install(Agent, dst); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Fatalf("installed agent: %v, %v", fi, err)
	}
}
