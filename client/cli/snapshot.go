package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/guestlink/guestlink/api"
)

// snapshotCommands returns the commands of issue 16: snapshot (create,
// list, delete, rename), restore and move.
func (s *session) snapshotCommands() []*cobra.Command {
	return []*cobra.Command{s.snapshotCommand(), s.restoreCommand(), s.moveCommand()}
}

func (s *session) snapshotCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Create, list, delete and rename instance snapshots",
		Args:  argsExactly(0),
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	var stateful, noFreeze bool
	create := &cobra.Command{
		Use:   "create NAME SNAP",
		Short: "Snapshot an instance (config, devices, disks; with --stateful, the running guest's memory too)",
		Long: "create takes a snapshot of an instance. A running guest whose agent is CONNECTED has its\n" +
			"filesystems frozen through the agent while the snapshot is taken, and thawed after it\n" +
			"(consistency: filesystem); a guest without a connected agent, with freeze switched off in\n" +
			"/etc/guestlink-agent.yaml, or taken with --no-freeze is snapshotted crash-consistent\n" +
			"(consistency: crash), and the answer says why.",
		Args: argsExactly(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			sn, err := s.client.CreateSnapshot(cmd.Context(), args[0], api.InstanceSnapshotsPost{Name: args[1], Stateful: stateful, NoFreeze: noFreeze})
			if err != nil {
				return err
			}
			return s.render(sn, func(w io.Writer) error {
				kind := "stateless"
				if sn.Stateful {
					kind = fmt.Sprintf("stateful, %s of memory state", bytesString(sn.StateSize))
				}
				_, err := fmt.Fprintf(w, "Snapshot %s of %s created (%s, consistency %s: %s)\n", sn.Name, args[0], kind,
					sn.Consistency, sn.ConsistencyDetail)
				return err
			})
		},
	}
	create.Flags().BoolVar(&stateful, "stateful", false, "also save the running guest's memory state (backends with snapshot.stateful.v1)")
	create.Flags().BoolVar(&noFreeze, "no-freeze", false, "do not freeze the running guest's filesystems through its agent (crash-consistent)")
	list := &cobra.Command{
		Use:   "list NAME",
		Short: "List an instance's snapshots, oldest first",
		Args:  argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			list, err := s.client.Snapshots(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return s.render(list, func(w io.Writer) error {
				fmt.Fprintln(w, "NAME\tTAKEN\tSTATEFUL\tREADY\tCONSISTENCY\tLAYOUT\tSIZE\tSTATE SIZE")
				for _, sn := range list {
					layout := sn.Details["layout"]
					if layout == "" {
						layout = "-"
					}
					consistency := sn.Consistency
					if consistency == "" {
						consistency = "-" // a daemon before consistency was recorded
					}
					fmt.Fprintf(w, "%s\t%s\t%t\t%t\t%s\t%s\t%s\t%s\n", sn.Name, sn.CreatedAt.Local().Format("2006-01-02 15:04:05"),
						sn.Stateful, sn.Ready, consistency, layout, bytesString(sn.Size), bytesString(sn.StateSize))
				}
				return nil
			})
		},
	}
	del := &cobra.Command{
		Use:   "delete NAME SNAP",
		Short: "Delete a snapshot and its files",
		Args:  argsExactly(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := s.client.DeleteSnapshot(cmd.Context(), args[0], args[1]); err != nil {
				return err
			}
			return s.render(map[string]string{"deleted": args[1]}, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "Snapshot %s of %s deleted\n", args[1], args[0])
				return err
			})
		},
	}
	rename := &cobra.Command{
		Use:   "rename NAME OLD NEW",
		Short: "Rename a snapshot",
		Args:  argsExactly(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			sn, err := s.client.RenameSnapshot(cmd.Context(), args[0], args[1], args[2])
			if err != nil {
				return err
			}
			return s.render(sn, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "Snapshot %s of %s renamed to %s\n", args[1], args[0], sn.Name)
				return err
			})
		},
	}
	cmd.AddCommand(create, list, del, rename)
	return cmd
}

func (s *session) restoreCommand() *cobra.Command {
	var stateful bool
	cmd := &cobra.Command{
		Use:   "restore NAME SNAP",
		Short: "Restore a snapshot (a snapshot of a running guest boots it; --stateful resumes its memory state)",
		Long: "restore puts back the snapshot's config, devices and disks, stopping a running instance first.\n" +
			"Without --stateful, a snapshot of a running instance boots afresh (Ready once the guest declares it)\n" +
			"and one of a stopped instance leaves it stopped. With --stateful the guest resumes from the\n" +
			"snapshot's memory state, Ready as it was then.",
		Args: argsExactly(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := s.client.Restore(cmd.Context(), args[0], api.InstancePut{Restore: args[1], Stateful: stateful})
			if err != nil {
				return err
			}
			return s.render(st, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "Instance %s restored from %s: %s\n", args[0], args[1], st.Status)
				return err
			})
		},
	}
	cmd.Flags().BoolVar(&stateful, "stateful", false, "resume the guest from the snapshot's memory state")
	return cmd
}

func (s *session) moveCommand() *cobra.Command {
	var backend string
	cmd := &cobra.Command{
		Use:   "move NAME --backend BACKEND",
		Short: "Move a stopped instance to another compatible backend (qemu-legacy <-> qemu), keeping disks, config and snapshots",
		Args:  argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if backend == "" {
				return fmt.Errorf("%s needs --backend (usage: %s)", cmd.CommandPath(), cmd.UseLine())
			}
			inst, err := s.client.Move(cmd.Context(), args[0], backend)
			if err != nil {
				return err
			}
			return s.render(inst, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "Instance %s moved to backend %s: %s\n", inst.Name, inst.Backend, inst.Status)
				return err
			})
		},
	}
	cmd.Flags().StringVarP(&backend, "backend", "b", "", "the backend to move the instance to")
	return cmd
}

// bytesString prints a byte count for people.
func bytesString(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
