package components

import (
	"strings"

	"github.com/guestlink/guestlink/api"
)

// GuestOS returns the guest's OS as its agent reported it ("Debian
// GNU/Linux 12 (bookworm)"), "" when unknown.
func GuestOS(g *api.GuestInfo) string {
	if g == nil || g.State == nil {
		return ""
	}
	return strings.TrimSpace(g.State.OS + " " + g.State.OSVersion)
}
