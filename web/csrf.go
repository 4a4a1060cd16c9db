package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"
)

const (
	// csrfKey is the local holding the page's CSRF token.
	csrfKey = "csrf"
	// csrfHeader is the header a script sends the token in (htmx does,
	// see live.js); forms send the field csrfField.
	csrfHeader = "X-CSRF-Token"
	csrfField  = "_csrf"
	// anonCookie binds the CSRF token of a dashboard that has no Sessions
	// (tests, embedders): a random value the browser keeps, nothing kept
	// here.
	anonCookie = "guestlink_csrf"
	// csrfDomain separates CSRF MACs from any other use of the key.
	csrfDomain = "guestlink dashboard csrf\x00"
)

// csrfSecret is the key the dashboard's CSRF tokens are derived with.
type csrfSecret []byte

func newCSRFSecret() csrfSecret {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		panic(fmt.Sprintf("reading random bytes for the CSRF key: %v", err)) // crypto/rand does not fail on Linux
	}
	return k
}

// token derives the CSRF token of a binding (a session id, or the anonymous
// cookie): HMAC-SHA256(key, binding). It is computed on every request and
// stored nowhere, so a flood of requests costs no memory, and it changes
// with the session, so a token read from one session is worthless in
// another.
func (k csrfSecret) token(binding string) string {
	m := hmac.New(sha256.New, k)
	m.Write([]byte(csrfDomain))
	m.Write([]byte(binding))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// csrf protects the state-changing routes against cross-site requests. The
// token the pages embed is derived from the session; a POST must carry it
// back (form field _csrf or header X-CSRF-Token) and must not be marked
// cross-site by the browser. Without Sessions the token is bound to an
// anonymous random cookie instead (double submit, signed), still with no
// state kept on the server.
func (d *Dashboard) csrf(c *fiber.Ctx) error {
	binding, _ := c.Locals(localSession).(string)
	if d.cfg.Sessions == nil {
		binding = c.Cookies(anonCookie)
		if !validAnonCookie(binding) {
			binding = ""
			if c.Method() == http.MethodGet || c.Method() == http.MethodHead {
				binding = randomToken()
				c.Cookie(&fiber.Cookie{Name: anonCookie, Value: binding, Path: "/", HTTPOnly: true, SameSite: fiber.CookieSameSiteStrictMode, SessionOnly: true, Secure: c.Context().IsTLS()})
			}
		}
	}
	want := ""
	if binding != "" {
		want = d.csrfKey.token(binding)
		c.Locals(csrfKey, want)
	}
	if c.Method() == http.MethodGet || c.Method() == http.MethodHead {
		return c.Next()
	}
	if err := sameOrigin(c); err != nil {
		return forbidden(c, err.Error())
	}
	got := c.Get(csrfHeader)
	if got == "" {
		got = c.FormValue(csrfField)
	}
	if want == "" || !hmac.Equal([]byte(got), []byte(want)) {
		return forbidden(c, "the form's security token is missing or stale; reload the page and try again")
	}
	return c.Next()
}

// forbidden answers 403 with a plain message.
func forbidden(c *fiber.Ctx, msg string) error {
	c.Status(http.StatusForbidden)
	c.Type("txt", "utf-8")
	return c.SendString("Forbidden: " + msg + "\n")
}

// randomToken returns 32 random bytes, base64url-encoded (43 characters).
func randomToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("reading random bytes: %v", err))
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// validAnonCookie reports whether v looks like a value randomToken made.
func validAnonCookie(v string) bool {
	if len(v) != 43 {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(v)
	return err == nil
}

// sameOrigin refuses a request the browser marks as cross-site or same-site
// (Sec-Fetch-Site: another port of the same host is same-site) or whose
// Origin is not this server. The Host compared is the request's own Host
// header, never X-Forwarded-Host. Under Referrer-Policy no-referrer,
// Chromium sends "Origin: null" with same-origin form posts: null passes
// only when the browser also says same-origin.
func sameOrigin(c *fiber.Ctx) error {
	site := c.Get("Sec-Fetch-Site")
	switch site {
	case "", "same-origin", "none":
	default:
		return fmt.Errorf("%s request refused", site)
	}
	if o := c.Get(fiber.HeaderOrigin); o != "" {
		if o == "null" && site == "same-origin" {
			return nil
		}
		u, err := url.Parse(o)
		if err != nil || o == "null" || !strings.EqualFold(u.Host, string(c.Request().Host())) {
			return fmt.Errorf("request from origin %q refused", o)
		}
	}
	return nil
}

// sameOriginStream guards the live stream: a page of another origin (even
// another port of this host) may not read it.
func sameOriginStream(c *fiber.Ctx) error {
	if err := sameOrigin(c); err != nil {
		return forbidden(c, "live stream: "+err.Error())
	}
	return c.Next()
}
