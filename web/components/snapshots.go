package components

import (
	"strings"

	"github.com/guestlink/guestlink/api"
)

// SnapshotSummary describes a snapshot in one line: when it was taken,
// stateful or not, Ready when taken, and the layout a state was saved
// under (QEMU).
func SnapshotSummary(s api.InstanceSnapshot) string {
	parts := []string{s.CreatedAt.UTC().Format("2006-01-02 15:04:05") + " UTC"}
	if s.Stateful {
		parts = append(parts, "stateful")
	} else {
		parts = append(parts, "stateless")
	}
	if s.Ready {
		parts = append(parts, "Ready when taken")
	}
	if l := s.Details["layout"]; l != "" && s.Stateful {
		parts = append(parts, l+" layout")
	}
	return strings.Join(parts, " · ")
}
