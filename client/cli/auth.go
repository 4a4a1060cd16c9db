package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/errdefs"
)

// authCommand is "guestlink auth": identities, tokens and sessions.
func (s *session) authCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "auth",
		Short: "Manage bearer identities, their tokens and dashboard sessions",
		RunE: func(_ *cobra.Command, args []string) error {
			return subcommandError("auth", args, "identity or session")
		},
	}
	identity := &cobra.Command{
		Use:   "identity",
		Short: "Manage identities (bearer/NAME)",
		RunE: func(_ *cobra.Command, args []string) error {
			return subcommandError("identity", args, "create, list, delete or token")
		},
	}
	token := &cobra.Command{
		Use:   "token",
		Short: "Issue and revoke bearer tokens",
		RunE: func(_ *cobra.Command, args []string) error {
			return subcommandError("token", args, "issue or revoke")
		},
	}
	token.AddCommand(s.tokenIssueCommand(), s.tokenRevokeCommand())
	identity.AddCommand(s.identityCreateCommand(), s.identityListCommand(), s.identityDeleteCommand(), token)
	session := &cobra.Command{
		Use:   "session",
		Short: "List and revoke dashboard sessions",
		RunE: func(_ *cobra.Command, args []string) error {
			return subcommandError("session", args, "list or revoke")
		},
	}
	session.AddCommand(s.sessionListCommand(), s.sessionRevokeCommand())
	cmd.AddCommand(identity, session)
	return cmd
}

// subcommandError says a group command was run without a known subcommand.
func subcommandError(group string, args []string, want string) error {
	if len(args) > 0 {
		return fmt.Errorf("unknown %s subcommand %q: use %s", group, args[0], want)
	}
	return fmt.Errorf("missing %s subcommand: %s", group, want)
}

// identityRef splits "bearer/NAME" or "devlxd/NAME" into its kind and
// NAME.
func identityRef(ref string) (kind, name string, err error) {
	kind, name, ok := strings.Cut(ref, "/")
	if !ok || name == "" || (kind != "bearer" && kind != "devlxd") {
		return "", "", fmt.Errorf("invalid identity %q: want bearer/NAME or devlxd/NAME: %w", ref, errdefs.ErrInvalid)
	}
	return kind, name, nil
}

func (s *session) identityCreateCommand() *cobra.Command {
	var instances []string
	var role string
	cmd := &cobra.Command{
		Use:   "create bearer/NAME | devlxd/NAME --instance NAME...",
		Short: "Create a bearer identity of the admin API, or a devlxd identity scoped to instances (then issue it a token)",
		Args:  argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name, err := identityRef(args[0])
			if err != nil {
				return err
			}
			if kind == "devlxd" {
				if len(instances) == 0 {
					return fmt.Errorf("devlxd/%s: at least one --instance NAME is required (the instances it may act for): %w", name, errdefs.ErrInvalid)
				}
				if role != "" {
					return fmt.Errorf("--role applies to bearer identities only (devlxd/%s acts for its instances): %w", name, errdefs.ErrInvalid)
				}
				_, err = s.client.CreateDevlxdIdentity(cmd.Context(), name, instances)
				return err
			}
			if len(instances) > 0 {
				return fmt.Errorf("--instance applies to devlxd identities only (bearer/%s is an admin API identity): %w", name, errdefs.ErrInvalid)
			}
			_, err = s.client.CreateBearerIdentityWith(cmd.Context(), api.IdentitiesBearerPost{Name: name, Role: role})
			return err
		},
	}
	cmd.Flags().StringArrayVar(&instances, "instance", nil, "devlxd identities: an instance it may act for (repeat for several)")
	cmd.Flags().StringVar(&role, "role", "", "bearer identities: admin (the default: everything) or viewer (reads instances, images, storage, backends, members and events; changes nothing)")
	return cmd
}

func (s *session) identityListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List identities: trusted certificates and bearer identities (never their tokens)",
		Args:  argsExactly(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := s.client.Identities(cmd.Context())
			if err != nil {
				return err
			}
			if list == nil {
				list = []api.Identity{}
			}
			return s.render(list, func(w io.Writer) error {
				row(w, "TYPE", "NAME", "ID", "ROLE", "TOKEN", "TOKEN EXPIRES", "CREATED BY", "INSTANCES")
				for _, x := range list {
					tok, exp := "", ""
					if x.Type == "bearer" || x.Type == "devlxd" {
						tok = "none"
						if x.HasToken {
							tok = "live"
							exp = "never"
						}
					}
					if x.TokenExpiresAt != nil {
						exp = x.TokenExpiresAt.Local().Format("2006-01-02 15:04:05")
						if x.HasToken && !x.TokenExpiresAt.After(time.Now()) {
							tok = "expired"
						}
					}
					row(w, x.Type, x.Name, x.ID, x.Role, tok, exp, x.CreatedBy, strings.Join(x.Instances, ","))
				}
				return nil
			})
		},
	}
}

func (s *session) identityDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete bearer/NAME | devlxd/NAME",
		Short: "Delete an identity and its token",
		Args:  argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name, err := identityRef(args[0])
			if err != nil {
				return err
			}
			if kind == "devlxd" {
				return s.client.DeleteDevlxdIdentity(cmd.Context(), name)
			}
			return s.client.DeleteBearerIdentity(cmd.Context(), name)
		},
	}
}

func (s *session) tokenIssueCommand() *cobra.Command {
	var expiry string
	cmd := &cobra.Command{
		Use:   "issue bearer/NAME | devlxd/NAME",
		Short: "Issue a token (replacing the live one) and print it alone on stdout",
		Args:  argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name, err := identityRef(args[0])
			if err != nil {
				return err
			}
			issue := s.client.IssueToken
			if kind == "devlxd" {
				issue = s.client.IssueDevlxdToken
			}
			tok, err := issue(cmd.Context(), name, expiry)
			if err != nil {
				return err
			}
			if s.format != FormatTable {
				return s.render(tok, nil)
			}
			_, err = fmt.Fprintln(s.out, tok.Token)
			return err
		},
	}
	cmd.Flags().StringVar(&expiry, "expiry", "", "token lifetime, e.g. 30m, 24h or 7d (default: no expiry)")
	return cmd
}

func (s *session) tokenRevokeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke bearer/NAME | devlxd/NAME",
		Short: "Revoke the identity's token",
		Args:  argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name, err := identityRef(args[0])
			if err != nil {
				return err
			}
			if kind == "devlxd" {
				return s.client.RevokeDevlxdToken(cmd.Context(), name)
			}
			return s.client.RevokeToken(cmd.Context(), name)
		},
	}
}

func (s *session) sessionListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the live dashboard sessions",
		Args:  argsExactly(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := s.client.Sessions(cmd.Context())
			if err != nil {
				return err
			}
			if list == nil {
				list = []api.Session{}
			}
			return s.render(list, func(w io.Writer) error {
				row(w, "ID", "CREATED", "EXPIRES", "LOGIN URL BY")
				for _, x := range list {
					row(w, strings.TrimPrefix(x.Name, "session/"), x.CreatedAt.Local().Format("2006-01-02 15:04:05"),
						x.ExpiresAt.Local().Format("2006-01-02 15:04:05"), x.CreatedBy)
				}
				return nil
			})
		},
	}
}

func (s *session) sessionRevokeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: "End a dashboard session (ID as auth session list shows it)",
		Args:  argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return s.client.RevokeSession(cmd.Context(), args[0])
		},
	}
}
