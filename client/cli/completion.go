package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/guestlink/guestlink/client"
)

// completionTimeout bounds the daemon's answer to a completion: a shell
// waits for it at every Tab.
const completionTimeout = 3 * time.Second

// instanceArgs are the commands whose positional arguments are instance
// names, by command path: every argument (true) or only the first (false).
// NewRootCommand gives each a ValidArgsFunction that completes names from
// the daemon (TestInstanceCompletionTable checks every path exists).
var instanceArgs = map[string]bool{
	"guestlink start":   true,
	"guestlink stop":    true,
	"guestlink restart": true,
	"guestlink delete":  true,
	"guestlink wait":    true,

	"guestlink info":                 false,
	"guestlink console":              false,
	"guestlink exec":                 false,
	"guestlink move":                 false,
	"guestlink restore":              false,
	"guestlink snapshot create":      false,
	"guestlink snapshot delete":      false,
	"guestlink snapshot list":        false,
	"guestlink snapshot rename":      false,
	"guestlink config get":           false,
	"guestlink config set":           false,
	"guestlink config unset":         false,
	"guestlink config show":          false,
	"guestlink config device add":    false,
	"guestlink config device list":   false,
	"guestlink config device remove": false,
	"guestlink config device set":    false,
	"guestlink config device unset":  false,
	"guestlink profile assign":       false,
}

// instanceFlags are the commands whose --instance flag takes instance
// names.
var instanceFlags = []string{"guestlink monitor", "guestlink auth identity create"}

// addCompletion gives the commands of instanceArgs and instanceFlags
// their instance-name completion and adds "guestlink completion". It finds
// them with Find, which keeps the order the commands were added in (the
// order of cobra's "Did you mean" suggestions).
func (s *session) addCompletion(root *cobra.Command) {
	find := func(path string) *cobra.Command {
		c, rest, err := root.Find(strings.Fields(path)[1:])
		if err != nil || len(rest) > 0 || c.CommandPath() != path {
			return nil // TestInstanceCompletionTable reports it
		}
		return c
	}
	for path, all := range instanceArgs {
		if c := find(path); c != nil {
			c.ValidArgsFunction = s.completeInstanceArgs(all)
		}
	}
	for _, path := range instanceFlags {
		if c := find(path); c != nil {
			_ = c.RegisterFlagCompletionFunc("instance", func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
				return s.instanceCompletions(cmd, toComplete, nil), cobra.ShellCompDirectiveNoFileComp
			})
		}
	}
	root.AddCommand(s.completionCommand())
}

// completeInstanceArgs completes an instance name for every positional
// argument (all) or only the first; a name already given is not offered
// again.
func (s *session) completeInstanceArgs(all bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if !all && len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return s.instanceCompletions(cmd, toComplete, args), cobra.ShellCompDirectiveNoFileComp
	}
}

// instanceCompletions returns the names of the daemon the command would
// reach (--remote, --state-dir, GUESTLINK_STATE_DIR, the switched remote)
// that start with prefix and are not in given, each with its status as the
// description. Without an answer (no daemon, an error) it returns nothing:
// a completion never prints an error into the user's command line.
func (s *session) instanceCompletions(cmd *cobra.Command, prefix string, given []string) []cobra.Completion {
	if s.client == nil {
		s.stateDirSet = cmd.Flags().Changed("state-dir")
		if err := s.connect(); err != nil {
			return nil
		}
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
	defer cancel()
	list, err := s.client.InstanceSummaries(ctx, client.InstanceFilter{}, "name", "status")
	if err != nil {
		return nil
	}
	var out []cobra.Completion
	for _, inst := range list {
		if strings.HasPrefix(inst.Name, prefix) && !slices.Contains(given, inst.Name) {
			out = append(out, cobra.CompletionWithDesc(inst.Name, inst.Status))
		}
	}
	return out
}

// isCompletionRequest reports whether cmd is cobra's hidden command that
// shells call at each Tab (__complete): it connects only when a
// completion needs the daemon.
func isCompletionRequest(cmd *cobra.Command) bool {
	return cmd.Name() == cobra.ShellCompRequestCmd || cmd.Name() == cobra.ShellCompNoDescRequestCmd
}

func (s *session) completionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print the shell completion script (bash, zsh or fish)",
		Long: `Print the completion script of guestlink for a shell. Commands, flags and
instance names complete; the names come from the daemon the command being
typed would reach (--remote, --state-dir, GUESTLINK_STATE_DIR, the switched
remote), with their status, and nothing completes when it does not answer.

  bash:  source <(guestlink completion bash)       # in ~/.bashrc, or save it as
         ~/.local/share/bash-completion/completions/guestlink
  zsh:   guestlink completion zsh > "${fpath[1]}/_guestlink"   # then start a new shell
  fish:  guestlink completion fish > ~/.config/fish/completions/guestlink.fish

The guestlink Debian package installs the same scripts.`,
		Args:        argsExactly(1),
		ValidArgs:   []cobra.Completion{"bash", "zsh", "fish"},
		Annotations: map[string]string{noClient: "true"},
		RunE: func(cmd *cobra.Command, args []string) error {
			root, out := cmd.Root(), cmd.OutOrStdout()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(out, true)
			case "zsh":
				return root.GenZshCompletion(out)
			case "fish":
				return root.GenFishCompletion(out, true)
			}
			return fmt.Errorf("unknown shell %q: want bash, zsh or fish", args[0])
		},
	}
}
