package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/guestlink/guestlink/api"
)

// clusterCommand is "guestlink cluster": the members of the daemon's
// cluster (docs/cluster.md).
func (s *session) clusterCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Manage the members of a guestlink cluster",
		Long: `Manage the members of a guestlink cluster: daemons that share one PostgreSQL
database. See docs/cluster.md.`,
	}
	cmd.AddCommand(s.clusterListCommand(), s.clusterAddCommand(), s.clusterRemoveCommand())
	return cmd
}

func (s *session) clusterListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the members, their address, version, heartbeat age and status",
		Args:  argsExactly(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := s.client.ClusterMembers(cmd.Context())
			if err != nil {
				return err
			}
			if list == nil {
				list = []api.ClusterMember{}
			}
			return s.render(list, func(w io.Writer) error {
				row(w, "NAME", "ADDRESS", "VERSION", "HEARTBEAT", "STATUS", "INSTANCES", "BACKENDS")
				for _, m := range list {
					name := m.Name
					if m.Self {
						name += " (this)"
					}
					beat, status := strconv.FormatFloat(m.HeartbeatAge, 'f', 1, 64)+"s ago", m.Status
					if m.Heartbeat.IsZero() {
						beat = "-"
					}
					if m.StatusReason != "" {
						status += " (" + m.StatusReason + ")"
					}
					row(w, name, m.Address, m.Version, beat, status, strconv.Itoa(m.Instances), strings.Join(m.Backends, ","))
				}
				return nil
			})
		},
	}
}

func (s *session) clusterAddCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "add NAME",
		Short: "Print a one-time join token for a new member",
		Long: `Print a one-time join token for a new member called NAME, alone on stdout.
Start the new member with it:

  guestlinkd --name NAME --join-file TOKENFILE --cluster-address HOST:PORT --database-file DBURLFILE

(files of mode 0600; GUESTLINK_JOIN and GUESTLINK_DATABASE_URL work too: --join and
--database would show the secrets to every local user in ps).

The token is valid for 3 hours and for one join; only its hash is stored.`,
		Args: argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tok, err := s.client.AddClusterMember(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return s.render(tok, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, tok.Token)
				return err
			})
		},
	}
}

func (s *session) clusterRemoveCommand() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "remove NAME [--force]",
		Short: "Remove a member (refused while it owns instances, unless --force)",
		Args:  argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := s.client.RemoveClusterMember(cmd.Context(), args[0], force)
			if err != nil {
				return err
			}
			if s.format != FormatTable {
				return s.render(res, nil)
			}
			fmt.Fprintf(s.out, "Member %s removed\n", args[0])
			if n := len(res.InstancesLeft); n > 0 {
				fmt.Fprintf(s.out, "Left in the database, still recorded at %s: %d instance(s): %s\n", args[0], n, strings.Join(res.InstancesLeft, ", "))
				fmt.Fprintf(s.out, "They show Unknown until deleted, or until a daemon joins as %s (guestlink cluster add %s) and takes them over.\n", args[0], args[0])
				fmt.Fprintf(s.out, "If %s still runs, it refuses every change to them from now on and has left the cluster (its guests keep running).\n", args[0])
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "remove the member even though it owns instances (they stay in the database, Unknown)")
	return cmd
}
