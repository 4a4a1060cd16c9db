package devlxd

import (
	"net/http"

	"github.com/gofiber/fiber/v2"
)

// UbuntuProSettings is the body of GET /1.0/ubuntu-pro.
type UbuntuProSettings struct {
	// GuestAttach is "off", "available" or "on".
	GuestAttach string `json:"guest_attach"`
}

// guestAttachOff is the only guest attachment setting guestlink has: like an
// LXD host without the Ubuntu Pro client (or not attached), it never lets a
// guest attach, whatever ubuntu_pro.guest_attach says.
const guestAttachOff = "off"

// getUbuntuPro serves GET /1.0/ubuntu-pro: {"guest_attach":"off"}.
func (s *Server) getUbuntuPro(c *fiber.Ctx) error {
	return sendSync(c, UbuntuProSettings{GuestAttach: guestAttachOff})
}

// msgGuestAttachOff is LXD's answer to POST /1.0/ubuntu-pro/token when
// guest attachment is off: its Pro client's refusal behind the devlxd
// handler's context.
const msgGuestAttachOff = "Failed getting an Ubuntu Pro guest token: Guest attachment not allowed"

// postUbuntuProToken serves POST /1.0/ubuntu-pro/token as LXD does when
// guest attachment is off: 403 msgGuestAttachOff.
func (s *Server) postUbuntuProToken(c *fiber.Ctx) error {
	return sendError(c, http.StatusForbidden, msgGuestAttachOff)
}

// getEvents answers GET /1.0/events on the daemon: the guest's agent serves
// the event stream itself from the events the daemon pushes to it, so the
// daemon's devlxd has none to stream.
func (s *Server) getEvents(c *fiber.Ctx) error {
	return sendError(c, http.StatusNotImplemented, "Events are served by the guest agent")
}
