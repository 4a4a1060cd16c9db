package cli

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// notInstanceNames are the commands whose first argument is called NAME
// but names something else than an existing instance.
var notInstanceNames = []string{
	"guestlink launch", // a new instance
	"guestlink backends info", "guestlink backends reload", "guestlink backends restart",
	"guestlink cluster add", "guestlink cluster remove",
	"guestlink image build", "guestlink image alias create", "guestlink image alias delete",
	"guestlink remote add", "guestlink remote remove", "guestlink remote switch",
}

// TestInstanceCompletionTable checks the table of commands completing
// instance names against the command tree: every listed command exists and
// got its completion, and every command whose first argument is a NAME or
// an INSTANCE is either listed or known to name something else (a new
// command taking an instance must be added to one of them).
func TestInstanceCompletionTable(t *testing.T) {
	root := NewRootCommand()
	byPath := map[string]*cobra.Command{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		byPath[c.CommandPath()] = c
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	for path := range instanceArgs {
		c, ok := byPath[path]
		if !ok {
			t.Errorf("instanceArgs lists %q, which is no command", path)
			continue
		}
		if c.ValidArgsFunction == nil {
			t.Errorf("%q completes no instance names", path)
		}
	}
	for _, path := range instanceFlags {
		c, ok := byPath[path]
		if !ok {
			t.Errorf("instanceFlags lists %q, which is no command", path)
			continue
		}
		if _, ok := c.GetFlagCompletionFunc("instance"); !ok {
			t.Errorf("%q --instance completes no instance names", path)
		}
	}
	for path, c := range byPath {
		f := strings.Fields(c.Use)
		if len(f) < 2 {
			continue
		}
		switch strings.TrimSuffix(f[1], "...") {
		case "NAME", "INSTANCE":
		default:
			continue
		}
		if _, listed := instanceArgs[path]; !listed && !slices.Contains(notInstanceNames, path) {
			t.Errorf("%q takes %s first: add it to instanceArgs (completion.go) or to notInstanceNames", path, f[1])
		}
	}
}

// TestCompletionScripts: guestlink completion prints each shell's script
// without a daemon, and refuses another shell.
func TestCompletionScripts(t *testing.T) {
	for _, tt := range []struct {
		shell, want string
	}{
		{"bash", "complete -o default -F __start_guestlink guestlink"},
		{"zsh", "#compdef guestlink"},
		{"fish", "complete -c guestlink"},
	} {
		t.Run(tt.shell, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Execute(context.Background(), []string{"--state-dir", "/nonexistent", "completion", tt.shell}, &out, &errb)
			if code != 0 || errb.Len() != 0 || !strings.Contains(out.String(), tt.want) {
				t.Fatalf("completion %s: exit %d, stderr %q, script without %q:\n%.300s", tt.shell, code, errb.String(), tt.want, out.String())
			}
		})
	}
	var out, errb bytes.Buffer
	if code := Execute(context.Background(), []string{"completion", "powershell"}, &out, &errb); code != 1 ||
		errb.String() != "Error: unknown shell \"powershell\": want bash, zsh or fish\n" {
		t.Fatalf("completion powershell: exit %d, stderr %q", code, errb.String())
	}
}
