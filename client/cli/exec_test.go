package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestExecUsageErrors: guestlink exec refuses what it cannot send, before
// it reaches a daemon (none runs here).
func TestExecUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no command", []string{"exec", "vm"}, "takes NAME and a command"},
		{"no name", []string{"exec"}, "takes NAME and a command"},
		{"-t and -T", []string{"exec", "vm", "-t", "-T", "--", "true"}, "-t and -T exclude each other"},
		{"env without =", []string{"exec", "vm", "--env", "FOO", "--", "true"}, `invalid --env "FOO": want KEY=VALUE`},
		{"negative user", []string{"exec", "vm", "--user", "-1", "--", "true"}, "invalid argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Execute(context.Background(), append([]string{"--state-dir", dir}, tc.args...), &out, &errb)
			if code != ExitError || !strings.Contains(errb.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q: want 1 and %q", code, errb.String(), tc.want)
			}
		})
	}
}
