// Package web is guestlink's browser dashboard: fiber handlers that turn
// requests into calls on the daemon's services and render templ components
// (web/components), plus the live event stream (server-sent events) that
// patches open pages in place. Services never see HTTP or HTML.
//
// Access: with Config.Sessions, every page, fragment, action and the live
// stream need a session, which a one-time login URL (GET /login?token=T)
// opens and POST /logout ends; the CSRF token of the forms is derived from
// the session, so nothing is stored per request. Every answer carries a
// strict Content-Security-Policy and the other security headers, and no
// X-Forwarded-* header is trusted.
//
// Dashboard.OpenStreams is read only by tests, which wait on it for a closed
// browser tab to release its stream.
package web

import (
	"context"
	"embed"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/filesystem"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/plugins/pluginhost"
)

//go:embed assets
var assets embed.FS

// Instances is what the dashboard needs of the instance service
// (core/instance.Manager). List returns the matching instances sorted by
// name; it does the filtering itself ("Running" matches Ready instances,
// agent "none" matches instances without an agent). A bad filter value is
// errdefs.ErrInvalid and an unknown instance errdefs.ErrNotFound.
type Instances interface {
	List(ctx context.Context, f instance.ListFilter) ([]*instance.Instance, error)
	Get(ctx context.Context, name string) (*instance.Instance, error)
	Start(ctx context.Context, name string, by events.Requestor) error
	Stop(ctx context.Context, name string, opts instance.StopOptions, by events.Requestor) error
	Restart(ctx context.Context, name string, opts instance.StopOptions, by events.Requestor) error
	Timeline(ctx context.Context, name string, limit int) ([]instance.TimelineEntry, error)
}

// Events is what the dashboard needs of the event bus (core/events.Bus
// satisfies it). The dashboard keeps one live lifecycle subscription for
// all open pages, plus a short-lived one per page that resumes from an
// older id.
type Events interface {
	// Subscribe starts a subscription; with f.After > 0 the stored events
	// after that id come first, then live ones, with no gap.
	Subscribe(f events.Filter) (*events.Subscription, error)
	// LastID returns the id of the newest event (0 when there is none).
	LastID(ctx context.Context) (int64, error)
	// Recent returns the newest n events of type typ, oldest first.
	Recent(ctx context.Context, typ string, n int) ([]events.Event, error)
}

// Backends lists the backend plugins and their health
// (plugins/pluginhost.Host satisfies it).
type Backends interface {
	List() []pluginhost.Status
}

var (
	_ Events    = (*events.Bus)(nil)
	_ Backends  = (*pluginhost.Host)(nil)
	_ Instances = (*instance.Manager)(nil)
	_ Consoles  = (*instance.Manager)(nil)
)

// Config configures the dashboard. Instances and Events are required.
type Config struct {
	Instances Instances
	Events    Events
	Backends  Backends // nil: the overview lists no backend
	// Editor serves the launch, delete and config forms; nil shows none.
	Editor Editor
	// DefaultBackend is the backend the launch form starts on (the
	// daemon's default for a launch that names none).
	DefaultBackend string
	// Images lists the store's images for the launch form; nil shows a
	// free-text image field.
	Images ImageLister
	// Consoles serves the console panel of the instance page, its live
	// stream and its download; nil shows no console.
	Consoles Consoles
	// Sessions authenticates dashboard users. With it, every page,
	// fragment, action and the live stream need a session (the login URL
	// gives one) and actions are recorded as done by that session. nil
	// leaves the dashboard open to whoever reaches it: only for tests and
	// embedders that authenticate otherwise; guestlinkd always sets it.
	Sessions Sessions
	Logger   *slog.Logger // nil: slog.Default()
	// PageSize is how many rows the instances table shows per page.
	PageSize int
	// Heartbeat is the period of the live stream's heartbeat.
	Heartbeat time.Duration
	// ActionTimeout bounds one start/stop/restart started from the page.
	ActionTimeout time.Duration
	// Guests are the agents' reports (address, OS); nil shows none.
	Guests Guests
	// Exec runs the instance page's terminal through the guest's agent;
	// nil shows no terminal.
	Exec Execer
	// Files serves the instance page's file download through the guest's
	// agent; nil shows no download form.
	Files GuestFiles
}

// Dashboard serves the web pages and the live stream.
type Dashboard struct {
	cfg   Config
	log   *slog.Logger
	frags *fragmentCache
	// scopes are the rows of the rendered list pages, for their streams.
	scopes pageScopes
	counts *countCache
	fleet  fleetCache
	hub    *hub
	// csrfKey derives the CSRF tokens; it lives as long as the process,
	// so a page loaded before a daemon restart must be reloaded to post.
	csrfKey csrfSecret
	// terms are the terminals opened from instance pages.
	terms terminals

	streams   atomic.Int64  // open live streams
	done      chan struct{} // closed by Close: ends every live stream
	closeOnce sync.Once
}

// New returns a dashboard over the given services.
func New(cfg Config) *Dashboard {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = 100
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 10 * time.Second
	}
	if cfg.ActionTimeout <= 0 {
		cfg.ActionTimeout = 2 * time.Minute
	}
	d := &Dashboard{cfg: cfg, log: cfg.Logger, done: make(chan struct{}), csrfKey: newCSRFSecret()}
	d.frags = newFragmentCache(d, 4096)
	d.counts = &countCache{d: d}
	d.hub = newHub(cfg.Events, d.log)
	return d
}

// Register mounts the dashboard's routes on r: "/login", "/logout" (with
// Sessions), "/", "/instances", "/instances/:name", their POST actions,
// "/images" and its imports section "/images/imports",
// "/events", "/assets/*", the instance page's terminal (POST
// "/instances/:name/terminal" and its websockets) and file download
// ("/instances/:name/files?path="). The app serving them must have Immutable set;
// its WriteTimeout bounds each write of the live streams, which extend
// their deadline at every flush (listener.StreamWriter). Every
// route answers with the security headers; all but the assets and the login
// page need a session (with Sessions), and the POST routes a CSRF token.
// The middleware is attached per route, so r may be shared with other
// handlers (the admin API).
func (d *Dashboard) Register(r fiber.Router) {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	r.Use("/assets", SecurityHeaders, filesystem.New(filesystem.Config{Root: http.FS(sub), MaxAge: 3600}))
	r.Get("/login", SecurityHeaders, d.login)
	page := []fiber.Handler{SecurityHeaders, d.authenticate, d.csrf}
	route := func(h fiber.Handler) []fiber.Handler { return append(slices.Clip(page), h) }
	r.Get("/events", SecurityHeaders, d.authenticate, sameOriginStream, d.stream)
	r.Get("/", route(d.overview)...)
	r.Get("/instances", route(d.instances)...)
	r.Get("/images", route(d.imagesPage)...)
	r.Get("/images/imports", route(d.importsFragment)...)
	r.Post("/instances/actions", route(d.bulkAction)...)
	r.Get("/instances/:name", route(d.instancePage)...)
	r.Post("/instances/:name/actions", route(d.instanceAction)...)
	d.registerForms(r, route)
	r.Get("/instances/:name/bootchart", route(d.bootChart)...)
	r.Get("/instances/:name/console.log", route(d.consoleDownload)...)
	r.Get("/instances/:name/console/stream", SecurityHeaders, d.authenticate, sameOriginStream, d.consoleStream)
	r.Post("/instances/:name/terminal", route(d.openTerminal)...)
	r.Get("/instances/:name/terminal/:id/:fd", SecurityHeaders, d.authenticate, d.terminalUpgrade, d.terminalSocket())
	r.Get("/instances/:name/files", route(d.downloadFile)...)
	if d.cfg.Sessions != nil {
		r.Post("/logout", route(d.logout)...)
	}
}

// Close ends every open live stream (the pages reconnect on their own), so
// that the server can shut down: call it before the fiber app's Shutdown,
// which otherwise waits for the streams forever. It is safe to call more
// than once.
func (d *Dashboard) Close() {
	d.closeOnce.Do(func() {
		close(d.done)
		d.hub.close()
	})
}

// OpenStreams returns how many live streams are open.
func (d *Dashboard) OpenStreams() int64 { return d.streams.Load() }
