package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/guestlink/guestlink/api"
)

// withTrust adds "trust" to the config command.
func (s *session) withTrust(config *cobra.Command) *cobra.Command {
	config.AddCommand(s.trustCommand())
	return config
}

// trustCommand is "guestlink config trust": the daemon's trust store of
// client certificates.
func (s *session) trustCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "trust",
		Short: "Manage the client certificates the daemon trusts over https",
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown trust subcommand %q: use add, list or remove", args[0])
			}
			return fmt.Errorf("missing trust subcommand: add, list or remove")
		},
	}
	cmd.AddCommand(s.trustAddCommand(), s.trustListCommand(), s.trustRemoveCommand())
	return cmd
}

func (s *session) trustAddCommand() *cobra.Command {
	var name, role string
	cmd := &cobra.Command{
		Use:   "add CERTFILE",
		Short: "Trust a client certificate (PEM), e.g. the client.crt a guestlink remote add printed",
		Args:  argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return fmt.Errorf("reading certificate: %w", err)
			}
			cert, err := s.client.TrustCertificate(cmd.Context(), api.CertificatesPost{Name: name, Type: "client", Certificate: string(data), Role: role})
			if err != nil {
				return err
			}
			return s.render(cert, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "Trusted %s (%s) as %s\n", cert.Name, cert.Fingerprint, cert.Role)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "name of the certificate (default: its common name)")
	cmd.Flags().StringVar(&role, "role", "", "admin (the default: everything) or viewer (reads instances, images, storage, backends, members and events; changes nothing)")
	return cmd
}

func (s *session) trustListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the trusted client certificates",
		Args:  argsExactly(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := s.client.Certificates(cmd.Context())
			if err != nil {
				return err
			}
			if list == nil {
				list = []api.Certificate{}
			}
			return s.render(list, func(w io.Writer) error {
				row(w, "NAME", "FINGERPRINT", "ROLE", "ADDED", "ADDED BY")
				for _, c := range list {
					row(w, c.Name, c.Fingerprint, c.Role, c.AddedAt.Local().Format("2006-01-02 15:04:05"), c.AddedBy)
				}
				return nil
			})
		},
	}
}

func (s *session) trustRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "remove FINGERPRINT",
		Short: "Stop trusting a client certificate",
		Args:  argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return s.client.RemoveCertificate(cmd.Context(), args[0])
		},
	}
}
