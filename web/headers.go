package web

import "github.com/gofiber/fiber/v2"

// ContentSecurityPolicy is the policy every dashboard response carries.
// Scripts, styles and connections (the live stream) come from this origin
// only, and no inline script or style runs: the pages load htmx, its SSE
// extension and live.js as files, and tell htmx not to inject its indicator
// styles or evaluate code. Nothing may frame the dashboard (clickjacking),
// and forms post to this origin only.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"

// SecurityHeaders is a fiber middleware that sets the dashboard's security
// headers on a response before anything else runs. Register puts it on
// every dashboard route, so pages, fragments, the live stream, assets, the
// login page and their error answers all carry them; a daemon may also
// app.Use it first on the whole TCP app, so that answers no dashboard
// route makes (unknown paths, a refused Host) carry them too.
// Referrer-Policy no-referrer keeps a login URL's token out of any Referer.
func SecurityHeaders(c *fiber.Ctx) error {
	h := &c.Response().Header
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	return c.Next()
}
