package adminapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/pluginhost"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// Limits of query values.
const (
	maxTimelineLimit = 10000
	maxStopTimeout   = 24 * 60 * 60 // seconds
)

// nameParam returns the :name path parameter, unescaped and validated.
func nameParam(c *fiber.Ctx) (string, error) {
	raw := c.Params("name")
	name, err := url.PathUnescape(raw)
	if err != nil {
		return "", badRequest("invalid instance name %q: bad escape", raw)
	}
	return name, instance.ValidateName(name)
}

// instanceLister is implemented by instance services that can hand out
// shared views for serialising (core/instance.Manager).
type instanceLister interface {
	ListFunc(ctx context.Context, f instance.ListFilter, fn func(*instance.Instance) error) error
}

var _ instanceLister = (*instance.Manager)(nil)

// statelessStarter is implemented by instance services that can start a
// guest without restoring its saved state (core/instance.Manager).
type statelessStarter interface {
	StartWith(ctx context.Context, name string, opts instance.StartOptions, by events.Requestor) error
}

var _ statelessStarter = (*instance.Manager)(nil)

// listInstances answers GET /1.0/instances.
func (a *API) listInstances(c *fiber.Ctx) error {
	filter := instance.ListFilter{
		Status:  c.Query("status"),
		Backend: c.Query("backend"),
		Agent:   c.Query("agent"),
		Query:   c.Query("q"),
	}
	switch instance.AgentState(filter.Agent) {
	case "", "none", instance.AgentStarted, instance.AgentConnected, instance.AgentStopped, instance.AgentLost:
	default:
		return badRequest("invalid agent filter %q: must be none, started, connected, stopped or lost", filter.Agent)
	}
	if l, ok := a.cfg.Instances.(instanceLister); ok {
		// Encode the shared views as they are listed: no copies. The
		// answer is sent from the encoder's chunks, never joined.
		e := newListEncoder()
		if err := l.ListFunc(c.UserContext(), filter, e.add); err != nil {
			return err
		}
		c.Status(http.StatusOK)
		c.Response().Header.SetContentType(fiber.MIMEApplicationJSON)
		c.Response().SetBodyStream(e.reader())
		return nil
	}
	list, err := a.cfg.Instances.List(c.UserContext(), filter)
	if err != nil {
		return err
	}
	body, err := appendInstanceList(list)
	if err != nil {
		return fmt.Errorf("listing instances: %w", err)
	}
	c.Status(http.StatusOK)
	c.Response().Header.SetContentType(fiber.MIMEApplicationJSON)
	c.Response().SetBodyRaw(body)
	return nil
}

// createInstance answers POST /1.0/instances with 201 and the new instance.
func (a *API) createInstance(c *fiber.Ctx) error {
	var req api.InstancesPost
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if err := instance.ValidateName(req.Name); err != nil {
		return err
	}
	// An empty backend is the daemon's default one.
	if req.Backend != "" {
		if err := a.checkBackend(req.Backend); err != nil {
			return err
		}
	}
	for k := range req.Config {
		if strings.TrimSpace(k) == "" {
			return badRequest("invalid config: empty key")
		}
	}
	for dev, props := range req.Devices {
		if strings.TrimSpace(dev) == "" {
			return badRequest("invalid devices: empty device name")
		}
		if props["type"] == "" {
			return badRequest("invalid device %q: type is required", dev)
		}
	}
	inst, err := a.cfg.Instances.Create(c.UserContext(), instance.CreateRequest{
		Name:    req.Name,
		Backend: req.Backend,
		Config:  req.Config,
		Image:   req.Image,
		Devices: req.Devices,
		Start:   req.Start,
		// nil (absent) is the default profile, [] none (as LXD).
		Profiles: req.Profiles,
	}, requestor(c))
	if err != nil {
		return err
	}
	return syncCreated(c, instance.WireInstance(inst, nil))
}

// checkBackend returns a 400 error unless a backend plugin of that name is
// loaded.
func (a *API) checkBackend(name string) error {
	list := a.cfg.Backends.List()
	names := make([]string, 0, len(list))
	for _, b := range list {
		if b.Name == name {
			return nil
		}
		names = append(names, b.Name)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return badRequest("unknown backend %q: no backend plugin is loaded", name)
	}
	return badRequest("unknown backend %q: loaded backends are %s", name, strings.Join(names, ", "))
}

// getInstance answers GET /1.0/instances/{name}: the instance object with
// its latest timeline entries.
func (a *API) getInstance(c *fiber.Ctx) error {
	name, err := nameParam(c)
	if err != nil {
		return err
	}
	inst, err := a.cfg.Instances.Get(c.UserContext(), name)
	if err != nil {
		return err
	}
	tl, err := a.cfg.Instances.Timeline(c.UserContext(), name, DefaultTimelineSummary)
	if err != nil {
		return err
	}
	return sync200(c, instance.WireInstance(inst, tl))
}

// patchInstance answers PATCH /1.0/instances/{name}.
func (a *API) patchInstance(c *fiber.Ctx) error {
	name, err := nameParam(c)
	if err != nil {
		return err
	}
	var req api.InstancePatch
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.Profiles != nil && len(req.Config) == 0 && len(req.Unset) == 0 {
		return a.assignProfiles(c, name, *req.Profiles) // profiles.go
	}
	if req.Profiles != nil {
		return badRequest("profiles are changed alone: send them without config or unset")
	}
	if len(req.Config) == 0 && len(req.Unset) == 0 {
		return badRequest("nothing to change: give config keys to set or unset keys")
	}
	for k := range req.Config {
		if strings.TrimSpace(k) == "" {
			return badRequest("invalid config: empty key")
		}
	}
	for _, k := range req.Unset {
		if strings.TrimSpace(k) == "" {
			return badRequest("invalid unset: empty key")
		}
		if _, ok := req.Config[k]; ok {
			return badRequest("config key %q is both set and unset", k)
		}
	}
	inst, err := a.cfg.Instances.UpdateConfig(c.UserContext(), name, req.Config, req.Unset, requestor(c))
	if err != nil {
		return err
	}
	return sync200(c, instance.WireInstance(inst, nil))
}

// deleteInstance answers DELETE /1.0/instances/{name}[?force=true].
func (a *API) deleteInstance(c *fiber.Ctx) error {
	name, err := nameParam(c)
	if err != nil {
		return err
	}
	force, err := boolQuery(c, "force")
	if err != nil {
		return err
	}
	if err := a.cfg.Instances.Delete(c.UserContext(), name, force, requestor(c)); err != nil {
		return err
	}
	return sync200(c, nil)
}

// getState answers GET /1.0/instances/{name}/state.
func (a *API) getState(c *fiber.Ctx) error {
	name, err := nameParam(c)
	if err != nil {
		return err
	}
	inst, err := a.cfg.Instances.Get(c.UserContext(), name)
	if err != nil {
		return err
	}
	return sync200(c, instance.WireState(inst))
}

// putState answers PUT /1.0/instances/{name}/state: it starts, stops or
// restarts the instance and answers its state afterwards.
func (a *API) putState(c *fiber.Ctx) error {
	name, err := nameParam(c)
	if err != nil {
		return err
	}
	var req api.InstanceStatePut
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.Timeout < 0 || req.Timeout > maxStopTimeout {
		return badRequest("invalid timeout %d: must be between 0 and %d seconds", req.Timeout, maxStopTimeout)
	}
	opts := instance.StopOptions{
		Timeout:  time.Duration(req.Timeout) * time.Second,
		Force:    req.Force,
		Stateful: req.Stateful,
	}
	if req.Stateless && req.Action != api.ActionStart {
		return badRequest("stateless applies to start only, not %q", req.Action)
	}
	ctx, by := c.UserContext(), requestor(c)
	switch req.Action {
	case api.ActionStart:
		if req.Stateless {
			s, ok := a.cfg.Instances.(statelessStarter)
			if !ok {
				return fmt.Errorf("starting instance %q without its saved state: %w", name, errdefs.ErrNotSupported)
			}
			err = s.StartWith(ctx, name, instance.StartOptions{Stateless: true}, by)
		} else {
			err = a.cfg.Instances.Start(ctx, name, by)
		}
	case api.ActionStop:
		err = a.cfg.Instances.Stop(ctx, name, opts, by)
	case api.ActionRestart:
		err = a.cfg.Instances.Restart(ctx, name, opts, by)
	case "":
		return badRequest("action is required: start, stop or restart")
	default:
		return badRequest("invalid action %q: must be start, stop or restart", req.Action)
	}
	if err != nil {
		return err
	}
	inst, err := a.cfg.Instances.Get(ctx, name)
	if err != nil {
		return err
	}
	return sync200(c, instance.WireState(inst))
}

// getTimeline answers GET /1.0/instances/{name}/timeline[?limit=N].
func (a *API) getTimeline(c *fiber.Ctx) error {
	name, err := nameParam(c)
	if err != nil {
		return err
	}
	limit := 100
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxTimelineLimit {
			return badRequest("invalid limit %q: must be an integer between 1 and %d", v, maxTimelineLimit)
		}
		limit = n
	}
	tl, err := a.cfg.Instances.Timeline(c.UserContext(), name, limit)
	if err != nil {
		return err
	}
	if tl == nil {
		tl = []instance.TimelineEntry{}
	}
	return sync200(c, instance.WireTimeline(tl))
}

// boolQuery parses an optional boolean query value ("1", "true", "0",
// "false", ...; absent or empty is false).
func boolQuery(c *fiber.Ctx, key string) (bool, error) {
	v := c.Query(key)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badRequest("invalid %s %q: must be true or false", key, v)
	}
	return b, nil
}

// listBackends answers GET /1.0/backends.
func (a *API) listBackends(c *fiber.Ctx) error {
	list := a.cfg.Backends.List()
	out := make([]api.Backend, 0, len(list))
	for _, s := range list {
		out = append(out, backendOut(s))
	}
	slices.SortFunc(out, func(x, y api.Backend) int { return strings.Compare(x.Name, y.Name) })
	return sync200(c, out)
}

// backendOut converts a plugin status to the wire's backend object.
func backendOut(s pluginhost.Status) api.Backend {
	caps := make([]string, 0, len(s.Capabilities))
	for _, c := range s.Capabilities {
		caps = append(caps, string(c))
	}
	return api.Backend{
		Name: s.Name, Path: s.Path, Version: s.Version, Capabilities: caps,
		Health: string(s.Health), Restarts: s.Restarts, LastError: s.LastError, PID: s.PID,
		Failures: s.Failures, NextRetryAt: s.NextRetryAt, SkippedChecks: s.SkippedChecks,
		InstanceType: s.InstanceType,
		Missing:      missingOut(s.Missing), Problem: sdk.MissingText(s.Missing),
	}
}

// missingOut converts what a plugin lacks to the wire's form.
func missingOut(ms []sdk.Missing) []api.BackendMissing {
	var out []api.BackendMissing
	for _, m := range ms {
		out = append(out, api.BackendMissing{What: m.What, Reason: m.Reason, Package: m.Package})
	}
	return out
}

// serverInfo builds the answer of GET /1.0.
func serverInfo(version string, pid int, backends []string) api.ServerInfo {
	slices.Sort(backends)
	return api.ServerInfo{
		APIVersion:    "1.0",
		APIStatus:     "stable",
		APIExtensions: []string{"instance_ready", "event_ids", "instance_timeline"},
		Auth:          "trusted",
		Environment: api.Environment{
			Server:        "guestlink",
			ServerVersion: version,
			ServerPID:     pid,
			Backends:      backends,
		},
	}
}
