package adminapi

import (
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
)

// MetricsPath is where the Prometheus metrics are served (Config.Metrics).
const MetricsPath = "/metrics"

// registerMetrics serves Config.Metrics at /metrics, authenticated and
// limited as every /1.0 route: on TCP a trusted client certificate or a
// bearer token, else 401; on the Unix socket the socket's mode.
func (a *API) registerMetrics(r fiber.Router) {
	if a.cfg.Metrics == nil {
		return
	}
	h := adaptor.HTTPHandler(a.cfg.Metrics)
	r.Get(MetricsPath, a.envelopeErrors, a.CheckHost, a.authenticate, a.limit, h)
}
