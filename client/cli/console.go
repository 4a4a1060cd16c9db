package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/guestlink/guestlink/client"
)

func (s *session) consoleCommand() *cobra.Command {
	var follow, showLog bool
	var tail int64
	cmd := &cobra.Command{
		Use:   "console NAME [--show-log] [--follow] [--tail BYTES]",
		Short: "Print an instance's console log",
		Long: `Print an instance's console log: what its guest wrote to the serial
console (QEMU: ttyS0) or, on the sim backend, the guest command's output.
The bytes are copied as the guest wrote them, escape sequences included.

--show-log is what "lxc console --show-log" does and the default: print
the log and exit. --follow keeps printing what the guest prints until
interrupted, the instance is deleted or the daemon stops. --tail BYTES
starts at the last BYTES bytes instead of the beginning.`,
		Args: argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_ = showLog // the default: there is no interactive console to attach to
			if tail < 0 {
				return fmt.Errorf("invalid --tail %d: must not be negative", tail)
			}
			r, err := s.client.Console(cmd.Context(), args[0], client.ConsoleOptions{Tail: tail, Follow: follow})
			if err != nil {
				return err
			}
			defer r.Close()
			_, err = io.Copy(cmd.OutOrStdout(), r)
			if err != nil && follow && errors.Is(cmd.Context().Err(), context.Canceled) {
				return nil // interrupted
			}
			if err != nil {
				return fmt.Errorf("reading console of instance %q: %w", args[0], err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&showLog, "show-log", false, "print the console log and exit (the default)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing what the guest prints")
	cmd.Flags().Int64Var(&tail, "tail", 0, "start at the last BYTES bytes of the log")
	return cmd
}
