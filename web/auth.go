package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/redact"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/web/components"
)

// Sessions authenticates dashboard users (core/auth.Service).
//
// A user gets in with a one-time login token (the URL `guestlink dashboard`
// opens, or the one guestlinkd prints at start); the dashboard redeems it
// once for a session whose id it keeps in an HttpOnly cookie, then
// validates that id on every request. Errors for unknown, used, expired or
// revoked tokens and sessions wrap errdefs.ErrUnauthorized; any other error
// is a failure of the service itself.
type Sessions interface {
	// Redeem exchanges a one-time login token for a new dashboard session.
	Redeem(ctx context.Context, loginToken string) (sessionID string, expires time.Time, err error)
	// Validate returns who the session is ("session/<8 chars>") or an error.
	Validate(ctx context.Context, sessionID string) (who string, err error)
	// Revoke ends a session.
	Revoke(ctx context.Context, sessionID string) error
}

const (
	// sessionCookie holds the dashboard session id.
	sessionCookie = "guestlink_session"
	// maxLoginToken and maxSessionID bound what the dashboard passes to
	// Sessions: anything longer is not something Sessions issued.
	maxLoginToken = 512
	maxSessionID  = 512

	// Locals set by authenticate for the handlers after it.
	localWho     = "guestlink.who"
	localSession = "guestlink.session"
)

// howToGetIn tells a user without a session where a login URL comes from.
const howToGetIn = "open the one-time login URL that `guestlink dashboard` opens (or `guestlink dashboard --print-url` prints), or the one guestlinkd printed at start"

// authenticate lets a request with a valid session cookie through and
// records who it is; without one, an HTML page request gets the login page
// and any other request (htmx, the live stream, a script) a 401 in LXD's
// error envelope. With no Sessions configured everyone is let through.
func (d *Dashboard) authenticate(c *fiber.Ctx) error {
	if d.cfg.Sessions == nil {
		return c.Next()
	}
	sid := c.Cookies(sessionCookie)
	if sid == "" {
		return d.unauthorized(c, "", "no dashboard session")
	}
	if len(sid) > maxSessionID {
		clearSessionCookie(c)
		return d.unauthorized(c, "Your session cookie is not valid: sign in again.", "invalid dashboard session")
	}
	who, err := d.cfg.Sessions.Validate(c.UserContext(), sid)
	if err != nil {
		if !errors.Is(err, errdefs.ErrUnauthorized) {
			return d.fail(c, fmt.Errorf("checking the dashboard session: %w", err))
		}
		clearSessionCookie(c)
		return d.unauthorized(c, "Your session has ended (it expired or was signed out): sign in again.", "dashboard session ended")
	}
	c.Locals(localWho, who)
	c.Locals(localSession, sid)
	return c.Next()
}

// unauthorized answers a request without a valid session: the login page
// (with notice, if any) for a browser asking for a page, else a 401 in the
// error envelope saying why (reason) and how to get in.
func (d *Dashboard) unauthorized(c *fiber.Ctx, notice, reason string) error {
	if wantsPage(c) {
		return d.loginPage(c, http.StatusUnauthorized, components.LoginData{Notice: notice})
	}
	c.Set("Cache-Control", "no-store")
	return c.Status(http.StatusUnauthorized).JSON(api.Error(http.StatusUnauthorized, reason+": "+howToGetIn))
}

// wantsPage reports whether the request is a browser asking for a whole
// page (a navigation or a plain form post), as opposed to htmx, the live
// stream or a script.
func wantsPage(c *fiber.Ctx) bool {
	if c.Get("HX-Request") != "" || c.Path() == "/events" {
		return false
	}
	switch c.Method() {
	case http.MethodGet, http.MethodHead, http.MethodPost:
	default:
		return false
	}
	return strings.Contains(c.Get(fiber.HeaderAccept), "text/html")
}

// login redeems the one-time token of a login URL (GET /login?token=T),
// sets the session cookie and redirects to the overview, so the token is
// gone from the address bar. Without a token it shows how to get one.
func (d *Dashboard) login(c *fiber.Ctx) error {
	if d.cfg.Sessions == nil {
		return c.Redirect("/", http.StatusSeeOther) // nothing to sign in to
	}
	var data components.LoginData
	if c.Query("out") != "" {
		data.Notice = "You are signed out."
	}
	if c.Query("ended") != "" {
		data.Notice = "Your session has ended (it expired or was signed out): sign in again."
	}
	token := c.Query("token")
	if token == "" {
		return d.loginPage(c, http.StatusUnauthorized, data)
	}
	if len(token) > maxLoginToken {
		data.Error = fmt.Sprintf("This is not a login token: it is %d bytes long, more than %d.", len(token), maxLoginToken)
		return d.loginPage(c, http.StatusBadRequest, data)
	}
	switch c.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		// Another site sent the browser here. Signing in now would let a
		// page log a visitor into a session of its choosing, and the
		// Strict cookie would not come back on the redirect anyway: ask
		// for a click on this origin first.
		data.Confirm = token
		return d.loginPage(c, http.StatusOK, data)
	}
	sid, expires, err := d.cfg.Sessions.Redeem(c.UserContext(), token)
	if err != nil {
		if !errors.Is(err, errdefs.ErrUnauthorized) {
			id := redact.NewRequestID()
			d.log.Error("dashboard: redeeming a login token", "request_id", id, "err", err)
			data.Error = "Signing in failed: " + redact.Message(err.Error(), id)
			return d.loginPage(c, http.StatusInternalServerError, data)
		}
		data.Error = "This login link does not work: it was already used, it expired, or it was never issued. Get a new one."
		return d.loginPage(c, http.StatusUnauthorized, data)
	}
	if old := c.Cookies(sessionCookie); old != "" && old != sid && len(old) <= maxSessionID {
		// The browser's previous session is replaced; end it rather than
		// leave it valid and unused until it expires.
		if err := d.cfg.Sessions.Revoke(c.UserContext(), old); err != nil && !errors.Is(err, errdefs.ErrUnauthorized) {
			d.log.Warn("dashboard: revoking the replaced session", "err", err)
		}
	}
	c.Cookie(&fiber.Cookie{
		Name:     sessionCookie,
		Value:    sid,
		Path:     "/",
		Expires:  expires,
		HTTPOnly: true,
		SameSite: fiber.CookieSameSiteStrictMode,
		Secure:   c.Context().IsTLS(), // the connection itself, never X-Forwarded-Proto
	})
	c.Set("Cache-Control", "no-store")
	return c.Redirect("/", http.StatusSeeOther)
}

// logout ends the session (POST /logout, CSRF-protected), clears the cookie
// and sends the browser to the login page.
func (d *Dashboard) logout(c *fiber.Ctx) error {
	sid, _ := c.Locals(localSession).(string)
	if err := d.cfg.Sessions.Revoke(c.UserContext(), sid); err != nil && !errors.Is(err, errdefs.ErrUnauthorized) {
		return d.fail(c, fmt.Errorf("signing out: %w", err))
	}
	clearSessionCookie(c)
	return c.Redirect("/login?out=1", http.StatusSeeOther)
}

// clearSessionCookie tells the browser to drop its session cookie.
func clearSessionCookie(c *fiber.Ctx) {
	c.Cookie(&fiber.Cookie{
		Name:     sessionCookie,
		Value:    "",
		Path:     "/",
		Expires:  time.Unix(0, 0),
		MaxAge:   -1,
		HTTPOnly: true,
		SameSite: fiber.CookieSameSiteStrictMode,
		Secure:   c.Context().IsTLS(),
	})
}

// loginPage renders the login page with a status.
func (d *Dashboard) loginPage(c *fiber.Ctx, status int, data components.LoginData) error {
	return render(c, status, components.LoginPage(data))
}

// requestor is who a dashboard request acts as: the session, so the
// timeline and the events say who did it. The address is the peer of the
// connection; X-Forwarded-For is never trusted.
func requestor(c *fiber.Ctx) events.Requestor {
	who, _ := c.Locals(localWho).(string)
	return events.Requestor{Protocol: "dashboard", Username: who, Address: c.Context().RemoteIP().String()}
}
