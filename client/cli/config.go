package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

func (s *session) configCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Read and change instance config keys",
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown config subcommand %q: use get, set, unset or show", args[0])
			}
			return fmt.Errorf("missing config subcommand: get, set, unset or show")
		},
	}
	cmd.AddCommand(s.configGetCommand(), s.configSetCommand(), s.configUnsetCommand(), s.configShowCommand())
	return cmd
}

func (s *session) configGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME KEY",
		Short: "Print one config value (empty if unset)",
		Args:  argsExactly(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			inst, err := s.client.Instance(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			v := inst.Config[args[1]]
			if s.format != FormatTable {
				return s.render(map[string]string{args[1]: v}, nil)
			}
			fmt.Fprintln(s.out, v)
			return nil
		},
	}
}

func (s *session) configSetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "set NAME KEY=VALUE... | set NAME KEY VALUE",
		Short: "Set config keys",
		Args:  argsAtLeast(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			pairs := args[1:]
			if len(pairs) == 2 && !strings.Contains(pairs[0], "=") {
				pairs = []string{pairs[0] + "=" + pairs[1]}
			}
			set, err := parseKeyValues(pairs, "config")
			if err != nil {
				return err
			}
			_, err = s.client.UpdateConfig(cmd.Context(), args[0], set, nil)
			return err
		},
	}
}

func (s *session) configUnsetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "unset NAME KEY...",
		Short: "Remove config keys",
		Args:  argsAtLeast(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := s.client.UpdateConfig(cmd.Context(), args[0], nil, args[1:])
			return err
		},
	}
}

func (s *session) configShowCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Print all config keys",
		Args:  argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			inst, err := s.client.Instance(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return s.render(inst.Config, func(w io.Writer) error {
				for _, k := range slices.Sorted(maps.Keys(inst.Config)) {
					row(w, k, inst.Config[k])
				}
				return nil
			})
		},
	}
}
