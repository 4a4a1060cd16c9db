package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/guestlink/guestlink/api"
)

func (s *session) backendsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backends",
		Short: "List the backend plugins and their health",
		Long: `List the backend plugins and their health.

A plugin that crashes, hangs or cannot start is started again after a
backoff that doubles up to one minute, forever: RESTARTS counts the
restarts, FAILURES the failures in a row, NEXT RETRY says when the next
attempt is and LAST ERROR why the last one failed. "guestlink backends
restart NAME" restarts a plugin now. A plugin whose first start is still
under way (the daemon answers before its plugins have started) is
"starting"; a launch made meanwhile waits for it.

A plugin that runs but lacks something on the host (the QEMU backends:
qemu-system-x86_64, qemu-img, genisoimage, QEMU's firmware) is
"unhealthy": the table is followed by what is missing and the Debian
package to install, and the daemon refuses to create or start guests on
it. It turns healthy once the package is installed, without a restart.`,
		Args: argsExactly(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := s.client.Backends(cmd.Context())
			if err != nil {
				return err
			}
			if list == nil {
				list = []api.Backend{}
			}
			return s.render(list, func(w io.Writer) error {
				row(w, "NAME", "HEALTH", "VERSION", "PID", "RESTARTS", "FAILURES", "NEXT RETRY", "CAPABILITIES", "LAST ERROR")
				for _, b := range list {
					backendRow(w, b)
				}
				return nil
			}, func(w io.Writer) error {
				for _, b := range list {
					if b.Problem != "" {
						if _, err := fmt.Fprintf(w, "%s cannot run guests: %s\n", b.Name, b.Problem); err != nil {
							return err
						}
					}
				}
				return nil
			})
		},
	}
	cmd.AddCommand(s.backendsInfoCommand(), s.backendsRestartCommand(), s.backendsInstallCommand(), s.backendsReloadCommand())
	return cmd
}

func (s *session) backendsInfoCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "info NAME",
		Short: "Show a backend plugin and the instance config keys it declares",
		Long: `Show a backend plugin: its health, version and capabilities, then the
instance config keys it declares under its prefixes (sim.*, qemu.*, ...),
with their type, default and meaning. The daemon refuses any other key
under those prefixes on launch and config set, before the plugin sees it.
A plugin that declares no keys (built before the schema) checks its keys
itself when a guest is created.`,
		Args: argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := s.client.Backend(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return s.render(b, func(w io.Writer) error {
				row(w, "NAME", "HEALTH", "VERSION", "PID", "RESTARTS", "FAILURES", "NEXT RETRY", "CAPABILITIES", "LAST ERROR")
				backendRow(w, *b)
				return nil
			}, func(w io.Writer) error {
				if b.Problem != "" {
					if _, err := fmt.Fprintf(w, "%s cannot run guests: %s\n", b.Name, b.Problem); err != nil {
						return err
					}
				}
				return configKeysTable(w, b)
			})
		},
	}
}

// configKeysTable writes the config keys a backend declares, or says it
// declares none.
func configKeysTable(w io.Writer, b *api.Backend) error {
	prefixes := strings.Join(b.ConfigPrefixes, ", ")
	if len(b.ConfigPrefixes) == 0 {
		_, err := fmt.Fprintf(w, "\n%s has told no config keys: it owns none, or has not started yet\n", b.Name)
		return err
	}
	if len(b.ConfigKeys) == 0 {
		_, err := fmt.Fprintf(w, "\n%s declares no config keys (prefixes: %s); it checks them when a guest is created\n", b.Name, prefixes)
		return err
	}
	if _, err := fmt.Fprintf(w, "\nConfig keys (prefixes: %s):\n", prefixes); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row(tw, "KEY", "TYPE", "DEFAULT", "MEANING")
	for _, k := range b.ConfigKeys {
		row(tw, k.Name, k.Type, k.Default, k.Doc)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	return nil
}

func (s *session) backendsRestartCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "restart NAME",
		Short: "Restart a backend plugin now and reset its backoff",
		Long: `Restart a backend plugin now: its process, if any, is killed and a new one
started at once, whatever the supervisor's backoff; the failure count is
reset. The command returns once the new process runs or failed to start,
and prints the plugin's health. The daemon then recovers the plugin's
guests, as after any plugin restart.`,
		Args: argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := s.client.RestartBackend(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return s.render(b, func(w io.Writer) error {
				switch b.Health {
				case "healthy":
					_, err := fmt.Fprintf(w, "Backend %s restarted: healthy, pid %d\n", b.Name, b.PID)
					return err
				case "unhealthy":
					_, err := fmt.Fprintf(w, "Backend %s restarted: unhealthy, pid %d: it cannot run guests: %s\n", b.Name, b.PID, b.Problem)
					return err
				}
				next := "soon"
				if b.NextRetryAt != nil {
					next = "at " + timeCell(b.NextRetryAt)
				}
				_, err := fmt.Fprintf(w, "Backend %s did not come back: %s (%s); retrying %s\n", b.Name, b.Health, b.LastError, next)
				return err
			})
		},
	}
}

// backendRow writes one backend of the table.
func backendRow(w io.Writer, b api.Backend) {
	pid := ""
	if b.PID != 0 {
		pid = strconv.Itoa(b.PID)
	}
	row(w, b.Name, b.Health, b.Version, pid, strconv.Itoa(b.Restarts), strconv.Itoa(b.Failures), timeCell(b.NextRetryAt),
		strings.Join(b.Capabilities, ","), b.LastError)
}
