package cli

import (
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/guestlink/guestlink/core/api/wire"
)

func (s *session) backendsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "backends",
		Short: "List the backend plugins and their health",
		Args:  argsExactly(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := s.client.Backends(cmd.Context())
			if err != nil {
				return err
			}
			if list == nil {
				list = []wire.Backend{}
			}
			return s.render(list, func(w io.Writer) error {
				row(w, "NAME", "HEALTH", "VERSION", "PID", "RESTARTS", "CAPABILITIES", "LAST ERROR")
				for _, b := range list {
					pid := ""
					if b.PID != 0 {
						pid = strconv.Itoa(b.PID)
					}
					row(w, b.Name, b.Health, b.Version, pid, strconv.Itoa(b.Restarts), strings.Join(b.Capabilities, ","), b.LastError)
				}
				return nil
			})
		},
	}
}
