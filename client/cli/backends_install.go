package cli

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/guestlink/guestlink/api"
)

func (s *session) backendsInstallCommand() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "install PATH",
		Short: "Install or upgrade a backend plugin without restarting the daemon",
		Long: `Install the plugin binary at PATH as a backend, or upgrade one, without
restarting the daemon. The daemon copies PATH (a file on the daemon's
machine, read by the daemon) into its plugin directory as NAME (default:
the file's name) with mode 0755, writes its sha256 into SHA256SUMS and
starts it; an upgraded plugin is restarted on the new binary and the daemon
recovers its guests. The command returns once the new process runs or
failed to start, and prints the plugin's health.`,
		Args: argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := filepath.Abs(args[0])
			if err != nil {
				return fmt.Errorf("installing backend from %q: %w", args[0], err)
			}
			b, err := s.client.InstallBackend(cmd.Context(), path, name)
			if err != nil {
				return err
			}
			return s.render(b, func(w io.Writer) error { return backendOutcome(w, b, "installed") })
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "backend name (default: the file's name)")
	return cmd
}

func (s *session) backendsReloadCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "reload NAME",
		Short: "Re-read a backend's checksum and restart it on its current binary",
		Long: `Reload a backend plugin without restarting the daemon: the daemon reads
SHA256SUMS again and restarts the plugin on the binary now in its plugin
directory (after replacing the file and its checksum by hand, for instance).
A binary that does not match its checksum is refused, the error shows both
hashes, and a running plugin keeps running. The command returns once the
new process runs or failed to start, and prints the plugin's health.`,
		Args: argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := s.client.ReloadBackend(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return s.render(b, func(w io.Writer) error { return backendOutcome(w, b, "reloaded") })
		},
	}
}

// backendOutcome writes one line about a backend after an install, reload
// or restart ("did" names what happened).
func backendOutcome(w io.Writer, b *api.Backend, did string) error {
	if b.Health == "healthy" {
		_, err := fmt.Fprintf(w, "Backend %s %s: healthy, version %s, pid %d\n", b.Name, did, b.Version, b.PID)
		return err
	}
	next := "soon"
	if b.NextRetryAt != nil {
		next = "at " + timeCell(b.NextRetryAt)
	}
	_, err := fmt.Fprintf(w, "Backend %s %s but did not start: %s (%s); retrying %s\n", b.Name, did, b.Health, b.LastError, next)
	return err
}
