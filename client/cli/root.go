// Package cli holds the cobra commands of guestlink, the command-line
// client of the daemon's admin API.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/guestlink/guestlink/client"
)

// Environment and defaults.
const (
	// EnvStateDir names the environment variable giving the default of
	// --state-dir.
	EnvStateDir = "GUESTLINK_STATE_DIR"
	// SocketName is the admin API socket inside the state directory.
	SocketName = "guestlink.sock"
)

// Output formats of --format.
const (
	FormatTable = "table"
	FormatJSON  = "json"
	FormatYAML  = "yaml"
)

// session is what every command shares: the global flags, the output and
// the API client (made before any command runs).
type session struct {
	stateDir    string
	stateDirSet bool   // --state-dir was given on the command line
	remote      string // --remote: a remote of the configuration (remote.go)
	format      string
	out         io.Writer
	client      *client.Client
}

// Execute runs the guestlink command line with args (without the program
// name) and returns the exit code: 0 on success, 1 after printing one line
// "Error: <message>" on stderr (the wait commands have codes of their own,
// see wait.go).
func Execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := NewRootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		if ce, ok := errors.AsType[*commandExit](err); ok {
			return ce.code // guestlink exec: the command's exit code, no message
		}
		fmt.Fprintf(stderr, "Error: %s\n", oneLine(err.Error()))
		return exitCode(err)
	}
	return 0
}

// NewRootCommand returns the guestlink command with all its subcommands.
// Errors are returned, not printed: Execute prints them.
func NewRootCommand() *cobra.Command {
	s := &session{}
	root := &cobra.Command{
		Use:           "guestlink",
		Short:         "Manage guestlink instances",
		Long:          "guestlink talks to the guestlink daemon over its admin API socket (STATE-DIR/" + SocketName + ").",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return s.setup(cmd)
		},
		PersistentPostRun: func(*cobra.Command, []string) {
			if s.client != nil {
				s.client.Close()
			}
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.PersistentFlags().StringVar(&s.stateDir, "state-dir", os.Getenv(EnvStateDir),
		"daemon state directory holding "+SocketName+" (env "+EnvStateDir+"); either one means that local daemon, whatever remote is switched")
	root.PersistentFlags().StringVar(&s.format, "format", FormatTable, "output format: table, json or yaml")
	root.PersistentFlags().StringVar(&s.remote, "remote", "", "talk to this remote (guestlink remote list); it beats --state-dir and "+EnvStateDir+". Default: --state-dir or "+EnvStateDir+", else the remote chosen with guestlink remote switch (guestlink remote switch local goes back)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return err })

	root.AddCommand(
		s.launchCommand(),
		s.startCommand(),
		s.stopCommand(),
		s.restartCommand(),
		s.deleteCommand(),
		s.listCommand(),
		s.infoCommand(),
		s.withDevices(s.withTrust(s.configCommand())),
		s.monitorCommand(),
		s.backendsCommand(),
		s.remoteCommand(),
		s.authCommand(),
		s.dashboardCommand(),
		s.consoleCommand(),
		s.waitCommand(),
		s.imageCommand(),
		s.execCommand(),
	)
	root.AddCommand(s.snapshotCommands()...)
	root.AddCommand(s.profileCommand())
	root.AddCommand(s.storageCommand())
	root.AddCommand(s.clusterCommand())
	root.AddCommand(s.fileCommand())
	s.addCompletion(root) // completion.go
	return root
}

// setup checks the global flags and makes the client.
func (s *session) setup(cmd *cobra.Command) error {
	switch s.format {
	case FormatTable, FormatJSON, FormatYAML:
	default:
		return fmt.Errorf("invalid format %q: must be table, json or yaml", s.format)
	}
	s.out = cmd.OutOrStdout()
	s.stateDirSet = cmd.Flags().Changed("state-dir")
	if isCompletionRequest(cmd) {
		return nil
	}
	for c := cmd; c != nil; c = c.Parent() {
		if c.Annotations[noClient] != "" {
			return nil
		}
	}
	return s.connect()
}

// oneLine joins the trimmed, non-empty lines of msg with spaces.
func oneLine(msg string) string {
	var parts []string
	for l := range strings.SplitSeq(msg, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " ")
}

// eachName runs fn for every name, going on after failures, and returns the
// failures joined in one message.
func eachName(names []string, fn func(name string) error) error {
	var msgs []string
	var errs []error
	for _, name := range names {
		if err := fn(name); err != nil {
			msgs = append(msgs, err.Error())
			errs = append(errs, err)
		}
	}
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return &multiError{msg: strings.Join(msgs, "; "), errs: errs}
}

// multiError is several failures reported on one line.
type multiError struct {
	msg  string
	errs []error
}

// Error returns the failures joined by "; ".
func (e *multiError) Error() string { return e.msg }

// Unwrap returns the failures.
func (e *multiError) Unwrap() []error { return e.errs }

// argsExactly requires n positional arguments.
func argsExactly(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return fmt.Errorf("%s takes %d argument(s), got %d (usage: %s)", cmd.CommandPath(), n, len(args), cmd.UseLine())
		}
		return nil
	}
}

// argsAtLeast requires at least n positional arguments.
func argsAtLeast(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return fmt.Errorf("%s takes at least %d argument(s), got %d (usage: %s)", cmd.CommandPath(), n, len(args), cmd.UseLine())
		}
		return nil
	}
}
