package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/internal/testenv"
)

// bashCompletionLib is the bash-completion package's library, which the
// scripts of cobra (and of most programs) call for the words typed.
const bashCompletionLib = "/usr/share/bash-completion/bash_completion"

// TestCompletionInstanceNames asks a running daemon's CLI for completions
// the way shells do (cobra's hidden __complete command): instance names
// with their status, filtered by what is typed, a name already given not
// offered again by commands taking several, nothing after the one name of
// info; a dead daemon completes nothing and exits 0. Then bash itself,
// with the script of "guestlink completion bash" sourced, completes
// "guestlink info w<Tab>".
func TestCompletionInstanceNames(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for _, name := range []string{"web1", "web2", "db1"} {
		if _, err := d.client.Create(ctx, api.InstancesPost{Name: name, Backend: "sim"}); err != nil {
			t.Fatal(err)
		}
	}
	// complete returns the candidates of one __complete call (the lines
	// before cobra's ":<directive>" line) and the directive.
	complete := func(t *testing.T, env []string, args ...string) ([]string, string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, filepath.Join(binDir, "guestlink"), append([]string{"__complete"}, args...)...)
		cmd.Env = append(cleanEnv(), env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("guestlink __complete %q: %v", args, err)
		}
		lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		return lines[:len(lines)-1], lines[len(lines)-1]
	}
	local := []string{"GUESTLINK_STATE_DIR=" + d.stateDir}
	for _, tt := range []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"info, all names", local, []string{"info", ""}, []string{"db1\tStopped", "web1\tStopped", "web2\tStopped"}},
		{"info, a prefix", local, []string{"info", "we"}, []string{"web1\tStopped", "web2\tStopped"}},
		{"info takes one name", local, []string{"info", "web1", ""}, nil},
		{"start takes several, not twice", local, []string{"start", "web1", ""}, []string{"db1\tStopped", "web2\tStopped"}},
		{"snapshot create: the instance first", local, []string{"snapshot", "create", "d"}, []string{"db1\tStopped"}},
		{"config device add: the instance first", local, []string{"config", "device", "add", ""}, []string{"db1\tStopped", "web1\tStopped", "web2\tStopped"}},
		{"monitor --instance", local, []string{"monitor", "--instance", "w"}, []string{"web1\tStopped", "web2\tStopped"}},
		{"--state-dir on the line", nil, []string{"--state-dir", d.stateDir, "delete", "db"}, []string{"db1\tStopped"}},
		{"no daemon: quietly nothing", []string{"GUESTLINK_STATE_DIR=" + t.TempDir()}, []string{"info", ""}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, directive := complete(t, tt.env, tt.args...)
			slices.Sort(got)
			if !slices.Equal(got, tt.want) || directive != ":4" { // 4: no file completion
				t.Fatalf("__complete %q = %q %s, want %q :4", tt.args, got, directive, tt.want)
			}
		})
	}

	script, err := exec.CommandContext(ctx, filepath.Join(binDir, "guestlink"), "completion", "bash").Output()
	if err != nil || !strings.Contains(string(script), "__start_guestlink") || !strings.Contains(string(script), "complete -o default -F __start_guestlink guestlink") {
		t.Fatalf("guestlink completion bash: %v, no completion script:\n%.300s", err, script)
	}
	if _, err := os.Stat(bashCompletionLib); err != nil {
		testenv.Requires(t, "bash-completion", "not installed (scripts/install-deps.sh installs it)")
	}
	scriptFile := filepath.Join(t.TempDir(), "guestlink.bash")
	if err := os.WriteFile(scriptFile, script, 0o644); err != nil {
		t.Fatal(err)
	}
	// What bash does at Tab after "guestlink info w": set COMP_* and call
	// the function the script registered.
	tab := `source ` + bashCompletionLib + `; source "$1"
COMP_LINE="guestlink info w"; COMP_POINT=${#COMP_LINE}; COMP_WORDS=(guestlink info w); COMP_CWORD=2
__start_guestlink
printf '%s\n' "${COMPREPLY[@]}"`
	bash := exec.CommandContext(ctx, "bash", "-c", tab, "tab", scriptFile)
	bash.Env = append(cleanEnv(), "GUESTLINK_STATE_DIR="+d.stateDir, "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stderr strings.Builder
	bash.Stderr = &stderr // compopt says it runs outside a real completion
	out, err := bash.Output()
	if err != nil {
		t.Fatalf("bash completing guestlink info w: %v\n%s%s", err, out, stderr.String())
	}
	got := strings.Fields(string(out))
	slices.Sort(got)
	if !slices.Equal(got, []string{"web1", "web2"}) {
		t.Fatalf("bash completes \"guestlink info w\" to %q, want web1 web2", got)
	}
}
