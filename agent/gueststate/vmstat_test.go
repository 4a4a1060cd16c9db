package gueststate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOOMKills reads the oom_kill counter from vmstat files as kernels
// write them: with the counter, without it (before 4.13), none at all.
func TestOOMKills(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, vmstat string
		want         uint64
	}{
		{"6.1 after a kill", "nr_free_pages 12345\npgfault 99\noom_kill 2\nnuma_hit 1\n", 2},
		{"no kill", "pgfault 99\noom_kill 0\n", 0},
		{"before 4.13", "nr_free_pages 12345\npgfault 99\n", 0},
		{"garbage", "oom_kill x\n", 0},
		{"no file", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			if tc.vmstat != "" {
				if err := os.WriteFile(path, []byte(tc.vmstat), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if got := oomKills(path); got != tc.want {
				t.Fatalf("oomKills = %d, want %d", got, tc.want)
			}
		})
	}
}
