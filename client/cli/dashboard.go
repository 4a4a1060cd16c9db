package cli

import (
	"fmt"
	"os"
	"os/exec"

	"github.com/spf13/cobra"
)

// dashboardCommand is "guestlink dashboard": a one-time login URL.
func (s *session) dashboardCommand() *cobra.Command {
	var printURL bool
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Open the dashboard with a one-time login URL (--print-url prints it alone)",
		Args:  argsExactly(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			login, err := s.client.DashboardLogin(cmd.Context())
			if err != nil {
				return err
			}
			if printURL || !hasDisplay() {
				_, err := fmt.Fprintln(s.out, login.URL)
				return err
			}
			opener, err := exec.LookPath("xdg-open")
			if err != nil {
				_, err := fmt.Fprintln(s.out, login.URL)
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "Opening the dashboard (the login URL is valid once, until %s)\n", login.ExpiresAt.Local().Format("15:04:05"))
			// The URL goes on the command line of a local process only.
			if err := exec.CommandContext(cmd.Context(), opener, login.URL).Run(); err != nil {
				return fmt.Errorf("opening %s with xdg-open: %w; open the URL yourself: %s", "the dashboard", err, login.URL)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&printURL, "print-url", false, "print the login URL alone on stdout instead of opening it")
	return cmd
}

// hasDisplay reports whether a graphical session is there to open a browser.
func hasDisplay() bool {
	return os.Getenv("DISPLAY") != "" || os.Getenv("WAYLAND_DISPLAY") != ""
}
