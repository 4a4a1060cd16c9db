package adminapi

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/instance"
)

// Waiter is the optional part of Instances that answers
// GET /1.0/instances/{name}/wait (core/instance.Manager implements it).
type Waiter interface {
	Wait(ctx context.Context, name, what string, timeout time.Duration) (*instance.WaitResult, error)
}

// Bounds of GET /1.0/instances/{name}/wait's timeout.
const (
	DefaultWaitTimeout = 30 * time.Second
	MaxWaitTimeout     = 24 * time.Hour
)

// registerWait adds the wait route to v1.
func (a *API) registerWait(v1 fiber.Router) {
	v1.Get("/instances/:name/wait", a.ok(a.waitInstance, instanceNameParam))
}

// isWait reports whether a request is a wait (a long poll, exempt from
// the request limits like the events websocket: it holds no resource but
// its connection while it waits).
func isWait(c *fiber.Ctx) bool {
	return c.Method() == fiber.MethodGet && strings.HasPrefix(c.Path(), "/1.0/instances/") &&
		strings.HasSuffix(strings.TrimSuffix(c.Path(), "/"), "/wait")
}

// waitInstance answers GET /1.0/instances/{name}/wait?for=ready&timeout=2m:
// a long poll answered when the condition holds, the instance can no
// longer meet it, or the timeout passes (docs/admin-api.md). The outcome
// is in the answer (200); an unknown instance is 404, a bad query 400.
func (a *API) waitInstance(r *request) (any, error) {
	name := r.Param("name")
	w, ok := a.cfg.Instances.(Waiter)
	if !ok {
		return nil, fiber.NewError(fiber.StatusNotImplemented, "this daemon cannot wait for instances")
	}
	what := r.Query("for")
	if what == "" {
		return nil, badRequest("missing for: one of %s", strings.Join(instance.WaitFors, ", "))
	}
	if !slices.Contains(instance.WaitFors, what) {
		return nil, badRequest("invalid for %q: must be one of %s", what, strings.Join(instance.WaitFors, ", "))
	}
	timeout := DefaultWaitTimeout
	if v := r.Query("timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, badRequest("invalid timeout %q: not a duration such as 30s or 2m", v)
		}
		if d <= 0 || d > MaxWaitTimeout {
			return nil, badRequest("invalid timeout %q: must be between 1ns and %s", v, MaxWaitTimeout)
		}
		timeout = d
	}
	start := time.Now()
	res, err := w.Wait(r.UserContext(), name, what, timeout)
	if err != nil {
		return nil, fmt.Errorf("waiting for instance %q: %w", name, err)
	}
	out := api.InstanceWait{Instance: name, For: what, Outcome: res.Outcome, WaitedMS: time.Since(start).Milliseconds()}
	if res.Instance != nil {
		out.Status, out.StatusCode = res.Instance.Status, res.Instance.StatusCode
		out.Conditions = instance.WireConditions(res.Instance.Conditions)
	}
	if out.Conditions == nil {
		out.Conditions = []api.Condition{}
	}
	return out, nil
}
