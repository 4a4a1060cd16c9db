package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/guestlink/guestlink/errdefs"
)

// withDevices adds "device" to the config command.
func (s *session) withDevices(config *cobra.Command) *cobra.Command {
	config.AddCommand(s.deviceCommand())
	return config
}

// deviceCommand is "guestlink config device": LXD's verbs on an instance's
// devices.
func (s *session) deviceCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "device",
		Short: "Manage instance devices (disk, nic)",
		RunE: func(_ *cobra.Command, args []string) error {
			return subcommandError("device", args, "add, set, unset, remove or list")
		},
	}
	cmd.AddCommand(s.deviceAddCommand(), s.deviceSetCommand(), s.deviceUnsetCommand(), s.deviceRemoveCommand(), s.deviceListCommand())
	return cmd
}

func (s *session) deviceAddCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "add INSTANCE DEVICE TYPE [key=value...]",
		Short: "Add a device: disk (pool=POOL source=VOLUME [path=] [readonly=]) or nic ([nictype=] [hwaddr=] [name=] ...)",
		Args:  argsAtLeast(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			kv, err := parseKeyValues(args[3:], "device key")
			if err != nil {
				return err
			}
			if _, ok := kv["type"]; ok {
				return fmt.Errorf("the type is the third argument, not a key: %w", errdefs.ErrInvalid)
			}
			kv["type"] = args[2]
			_, err = s.client.AddDevice(cmd.Context(), args[0], args[1], kv)
			return err
		},
	}
}

func (s *session) deviceSetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "set INSTANCE DEVICE key=value...",
		Short: "Set keys of a device (an empty value unsets the key)",
		Args:  argsAtLeast(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			kv, err := parseKeyValues(args[2:], "device key")
			if err != nil {
				return err
			}
			set := map[string]string{}
			var unset []string
			for k, v := range kv {
				if v == "" {
					unset = append(unset, k)
				} else {
					set[k] = v
				}
			}
			_, err = s.client.SetDevice(cmd.Context(), args[0], args[1], set, unset)
			return err
		},
	}
}

func (s *session) deviceUnsetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "unset INSTANCE DEVICE KEY...",
		Short: "Unset keys of a device",
		Args:  argsAtLeast(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := s.client.SetDevice(cmd.Context(), args[0], args[1], nil, args[2:])
			return err
		},
	}
}

func (s *session) deviceRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "remove INSTANCE DEVICE...",
		Short: "Remove devices",
		Args:  argsAtLeast(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, dev := range args[1:] {
				if _, err := s.client.RemoveDevice(cmd.Context(), args[0], dev); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func (s *session) deviceListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list INSTANCE",
		Short: "List an instance's devices",
		Args:  argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			inst, err := s.client.Instance(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			devs := inst.Devices
			if devs == nil {
				devs = map[string]map[string]string{}
			}
			return s.render(devs, func(w io.Writer) error {
				row(w, "NAME", "TYPE", "CONFIG")
				for _, name := range slices.Sorted(maps.Keys(devs)) {
					d := devs[name]
					var kv []string
					for _, k := range slices.Sorted(maps.Keys(d)) {
						if k != "type" {
							kv = append(kv, k+"="+d[k])
						}
					}
					row(w, name, d["type"], strings.Join(kv, " "))
				}
				return nil
			})
		},
	}
}
