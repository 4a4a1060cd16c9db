package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/guestlink/guestlink/api"
)

// storageCommand is "guestlink storage": pools and custom volumes.
func (s *session) storageCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "storage",
		Short: "Manage storage pools and custom volumes",
		RunE: func(_ *cobra.Command, args []string) error {
			return subcommandError("storage", args, "pool or volume")
		},
	}
	pool := &cobra.Command{
		Use:   "pool",
		Short: "Storage pools",
		RunE: func(_ *cobra.Command, args []string) error {
			return subcommandError("storage pool", args, "list")
		},
	}
	pool.AddCommand(s.poolListCommand())
	vol := &cobra.Command{
		Use:   "volume",
		Short: "Custom volumes (block) and their snapshots",
		RunE: func(_ *cobra.Command, args []string) error {
			return subcommandError("storage volume", args, "create, list, show, delete or snapshot")
		},
	}
	vol.AddCommand(s.volumeCreateCommand(), s.volumeListCommand(), s.volumeShowCommand(), s.volumeDeleteCommand(), s.volumeSnapshotCommand())
	cmd.AddCommand(pool, vol)
	return cmd
}

func (s *session) poolListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List storage pools",
		Args:  argsExactly(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := s.client.StoragePools(cmd.Context())
			if err != nil {
				return err
			}
			if list == nil {
				list = []api.StoragePool{}
			}
			return s.render(list, func(w io.Writer) error {
				row(w, "NAME", "DRIVER", "STATUS", "SOURCE")
				for _, p := range list {
					row(w, p.Name, p.Driver, p.Status, p.Source)
				}
				return nil
			})
		},
	}
}

func (s *session) volumeCreateCommand() *cobra.Command {
	var desc string
	cmd := &cobra.Command{
		Use:   "create POOL VOLUME [size=10GiB]",
		Short: "Create a custom block volume",
		Args:  argsAtLeast(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := parseKeyValues(args[2:], "volume config")
			if err != nil {
				return err
			}
			_, err = s.client.CreateStorageVolume(cmd.Context(), args[0], api.StorageVolumesPost{Name: args[1], Description: desc, Config: cfg})
			return err
		},
	}
	cmd.Flags().StringVar(&desc, "description", "", "volume description")
	return cmd
}

func (s *session) volumeListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list POOL",
		Short: "List a pool's custom volumes",
		Args:  argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			list, err := s.client.StorageVolumes(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if list == nil {
				list = []api.StorageVolume{}
			}
			return s.render(list, func(w io.Writer) error {
				row(w, "NAME", "TYPE", "CONTENT TYPE", "SIZE", "DESCRIPTION", "CREATED")
				for _, v := range list {
					row(w, v.Name, v.Type, v.ContentType, v.Config["size"], v.Description, v.CreatedAt.Local().Format(time.DateTime))
				}
				return nil
			})
		},
	}
}

func (s *session) volumeShowCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "show POOL VOLUME",
		Short: "Show a custom volume and its snapshots",
		Args:  argsExactly(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := s.client.StorageVolume(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			snaps, err := s.client.StorageVolumeSnapshots(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			out := struct {
				api.StorageVolume
				Snapshots []api.StorageVolume `json:"snapshots"`
			}{*v, snaps}
			return s.render(out, func(w io.Writer) error {
				fmt.Fprintf(w, "name: %s\npool: %s\ntype: %s\ncontent_type: %s\ndescription: %s\nsize: %s\ncreated_at: %s\nsnapshots:\n",
					v.Name, v.Pool, v.Type, v.ContentType, v.Description, v.Config["size"], v.CreatedAt.Format(time.RFC3339))
				for _, sn := range snaps {
					fmt.Fprintf(w, "- %s (%s)\n", strings.TrimPrefix(sn.Name, v.Name+"/"), sn.CreatedAt.Format(time.RFC3339))
				}
				return nil
			})
		},
	}
}

func (s *session) volumeDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete POOL VOLUME[/SNAPSHOT]",
		Short: "Delete a custom volume (and its snapshots) or one snapshot",
		Args:  argsExactly(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if vol, snap, ok := strings.Cut(args[1], "/"); ok {
				return s.client.DeleteStorageVolumeSnapshot(cmd.Context(), args[0], vol, snap)
			}
			return s.client.DeleteStorageVolume(cmd.Context(), args[0], args[1])
		},
	}
}

func (s *session) volumeSnapshotCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "snapshot POOL VOLUME [SNAPSHOT]",
		Short: "Snapshot a custom volume (default name snapN)",
		Args:  cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 3 {
				name = args[2]
			} else {
				snaps, err := s.client.StorageVolumeSnapshots(cmd.Context(), args[0], args[1])
				if err != nil {
					return err
				}
				name = fmt.Sprintf("snap%d", len(snaps))
			}
			_, err := s.client.CreateStorageVolumeSnapshot(cmd.Context(), args[0], args[1], name)
			return err
		},
	}
}
