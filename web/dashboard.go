// Package web is guestlink's browser dashboard: fiber handlers that turn
// requests into calls on the daemon's services and render templ components
// (web/components), plus the live event stream (server-sent events) that
// patches open pages in place. Services never see HTTP or HTML.
package web

import (
	"context"
	"embed"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/filesystem"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/pluginhost"
)

//go:embed assets
var assets embed.FS

// Instances is what the dashboard needs of the instance service.
type Instances interface {
	List(ctx context.Context, f instance.ListFilter) ([]*instance.Instance, error)
	Get(ctx context.Context, name string) (*instance.Instance, error)
	Start(ctx context.Context, name string, by events.Requestor) error
	Stop(ctx context.Context, name string, opts instance.StopOptions, by events.Requestor) error
	Restart(ctx context.Context, name string, opts instance.StopOptions, by events.Requestor) error
	Timeline(ctx context.Context, name string, limit int) ([]instance.TimelineEntry, error)
}

// Events is what the dashboard needs of the event bus.
type Events interface {
	Subscribe(f events.Filter) (*events.Subscription, error)
	// LastID returns the id of the newest event (0 when there is none).
	LastID(ctx context.Context) (int64, error)
	// Recent returns the newest n events of type typ, oldest first.
	Recent(ctx context.Context, typ string, n int) ([]events.Event, error)
}

// Backends lists the backend plugins and their health.
type Backends interface {
	List() []pluginhost.Status
}

// Config configures the dashboard.
type Config struct {
	Instances Instances
	Events    Events
	Backends  Backends
	Logger    *slog.Logger
	// PageSize is how many rows the instances table shows per page.
	PageSize int
	// Heartbeat is the period of the live stream's heartbeat.
	Heartbeat time.Duration
	// ActionTimeout bounds one start/stop/restart started from the page.
	ActionTimeout time.Duration
}

// Dashboard serves the web pages and the live stream.
type Dashboard struct {
	cfg    Config
	log    *slog.Logger
	frags  *fragmentCache
	counts *countCache
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
	d := &Dashboard{cfg: cfg, log: cfg.Logger}
	d.frags = newFragmentCache(d, 4096)
	d.counts = &countCache{d: d, ttl: time.Second}
	return d
}

// Register mounts the dashboard's routes on r: "/", "/instances",
// "/instances/:name", their POST actions, "/events" and "/assets/*". The app
// serving them must have a zero WriteTimeout (the live stream is long-lived).
func (d *Dashboard) Register(r fiber.Router) {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	r.Use("/assets", filesystem.New(filesystem.Config{Root: http.FS(sub), MaxAge: 3600}))
	r.Get("/events", d.stream)
	guarded := r.Group("", d.csrf())
	guarded.Get("/", d.overview)
	guarded.Get("/instances", d.instances)
	guarded.Post("/instances/actions", d.bulkAction)
	guarded.Get("/instances/:name", d.instancePage)
	guarded.Post("/instances/:name/actions", d.instanceAction)
}
