package adminapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/pluginhost"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// Limits of query values.
const (
	maxTimelineLimit = 10000
	maxStopTimeout   = 24 * 60 * 60 // seconds
)

// instanceLister is implemented by instance services that can hand out
// shared views for serialising (core/instance.Manager).
type instanceLister interface {
	ListFunc(ctx context.Context, f instance.ListFilter, fn func(*instance.Instance) error) error
}

var _ instanceLister = (*instance.Manager)(nil)

// cachedLister is implemented by instance services that keep a cache slot
// per instance for what a list derives from its view (core/instance.Manager):
// the list copies each instance's encoding from it (list_cache.go).
type cachedLister interface {
	ListCachedFunc(ctx context.Context, f instance.ListFilter, fn func(rows []instance.CachedRow) error) error
}

var _ cachedLister = (*instance.Manager)(nil)

// statelessStarter is implemented by instance services that can start a
// guest without restoring its saved state (core/instance.Manager).
type statelessStarter interface {
	StartWith(ctx context.Context, name string, opts instance.StartOptions, by events.Requestor) error
}

var _ statelessStarter = (*instance.Manager)(nil)

// listInstances answers GET /1.0/instances in the form asked
// (list_forms.go): URLs, full objects or summaries.
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
	form, fields, err := parseListForm(c)
	if err != nil {
		return err
	}
	e, err := a.encodeList(c, filter, form, fields)
	if err != nil {
		return err
	}
	// The answer is sent from the encoder's chunks, never joined.
	c.Status(http.StatusOK)
	c.Response().Header.SetContentType(fiber.MIMEApplicationJSON)
	c.Response().SetBodyStream(e.reader())
	return nil
}

// createInstance answers POST /1.0/instances with 201 and the new instance.
func (a *API) createInstance(r *request, req *api.InstancesPost) (any, error) {
	if err := instance.ValidateName(req.Name); err != nil {
		return nil, err
	}
	// An empty backend is the daemon's default one.
	if req.Backend != "" {
		if err := a.checkBackend(req.Backend); err != nil {
			return nil, err
		}
	}
	if err := checkConfigKeys(req.Config); err != nil {
		return nil, err
	}
	for dev, props := range req.Devices {
		if strings.TrimSpace(dev) == "" {
			return nil, badRequest("invalid devices: empty device name")
		}
		if props["type"] == "" {
			return nil, badRequest("invalid device %q: type is required", dev)
		}
	}
	return wireInstanceOf(a.cfg.Instances.Create(r.UserContext(), instance.CreateRequest{
		Name:    req.Name,
		Backend: req.Backend,
		Config:  req.Config,
		Image:   req.Image,
		Devices: req.Devices,
		Start:   req.Start,
		// nil (absent) is the default profile, [] none (as LXD).
		Profiles: req.Profiles,
	}, requestor(r.Ctx)))
}

// wireInstanceOf answers an instance without its timeline, or the error of
// getting it.
var wireInstanceOf = wired(func(inst *instance.Instance) api.Instance { return instance.WireInstance(inst, nil) })

// checkConfigKeys refuses an empty key among the config keys to set.
func checkConfigKeys(config map[string]string) error {
	for k := range config {
		if strings.TrimSpace(k) == "" {
			return badRequest("invalid config: empty key")
		}
	}
	return nil
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
func (a *API) getInstance(r *request) (any, error) {
	name := r.Param("name")
	inst, err := a.cfg.Instances.Get(r.UserContext(), name)
	if err != nil {
		return nil, err
	}
	tl, err := a.cfg.Instances.Timeline(r.UserContext(), name, DefaultTimelineSummary)
	if err != nil {
		return nil, err
	}
	w := instance.WireInstance(inst, tl)
	w.Guest = a.refreshedGuest(inst.UUID)
	return w, nil
}

// patchInstance answers PATCH /1.0/instances/{name}.
func (a *API) patchInstance(r *request, req *api.InstancePatch) (any, error) {
	if req.Profiles != nil && len(req.Config) == 0 && len(req.Unset) == 0 {
		return a.assignProfiles(r, r.Param("name"), *req.Profiles) // profiles.go
	}
	if req.Profiles != nil {
		return nil, badRequest("profiles are changed alone: send them without config or unset")
	}
	if len(req.Config) == 0 && len(req.Unset) == 0 {
		return nil, badRequest("nothing to change: give config keys to set or unset keys")
	}
	if err := checkConfigKeys(req.Config); err != nil {
		return nil, err
	}
	for _, k := range req.Unset {
		if strings.TrimSpace(k) == "" {
			return nil, badRequest("invalid unset: empty key")
		}
		if _, ok := req.Config[k]; ok {
			return nil, badRequest("config key %q is both set and unset", k)
		}
	}
	return wireInstanceOf(a.cfg.Instances.UpdateConfig(r.UserContext(), r.Param("name"), req.Config, req.Unset, requestor(r.Ctx)))
}

// deleteInstance answers DELETE /1.0/instances/{name}[?force=true].
func (a *API) deleteInstance(r *request) (any, error) {
	force, err := boolQuery(r.Ctx, "force")
	if err != nil {
		return nil, err
	}
	return nil, a.cfg.Instances.Delete(r.UserContext(), r.Param("name"), force, requestor(r.Ctx))
}

// getState answers GET /1.0/instances/{name}/state.
func (a *API) getState(r *request) (any, error) {
	inst, err := a.cfg.Instances.Get(r.UserContext(), r.Param("name"))
	if err != nil {
		return nil, err
	}
	st := instance.WireState(inst)
	st.Guest = a.guestInfo(r.UserContext(), inst.UUID)
	return st, nil
}

// stateOf answers the state of the instance called name, after a change.
func (a *API) stateOf(ctx context.Context, name string) (any, error) {
	inst, err := a.cfg.Instances.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	return instance.WireState(inst), nil
}

// putState answers PUT /1.0/instances/{name}/state: it starts, stops or
// restarts the instance and answers its state afterwards.
func (a *API) putState(r *request, req *api.InstanceStatePut) (any, error) {
	name := r.Param("name")
	if req.Timeout < 0 || req.Timeout > maxStopTimeout {
		return nil, badRequest("invalid timeout %d: must be between 0 and %d seconds", req.Timeout, maxStopTimeout)
	}
	opts := instance.StopOptions{
		Timeout:  time.Duration(req.Timeout) * time.Second,
		Force:    req.Force,
		Stateful: req.Stateful,
	}
	if req.Stateless && req.Action != api.ActionStart {
		return nil, badRequest("stateless applies to start only, not %q", req.Action)
	}
	ctx, by := r.UserContext(), requestor(r.Ctx)
	var err error
	switch req.Action {
	case api.ActionStart:
		if req.Stateless {
			s, ok := a.cfg.Instances.(statelessStarter)
			if !ok {
				return nil, fmt.Errorf("starting instance %q without its saved state: %w", name, errdefs.ErrNotSupported)
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
		return nil, badRequest("action is required: start, stop or restart")
	default:
		return nil, badRequest("invalid action %q: must be start, stop or restart", req.Action)
	}
	if err != nil {
		return nil, err
	}
	return a.stateOf(ctx, name)
}

// getTimeline answers GET /1.0/instances/{name}/timeline[?limit=N].
func (a *API) getTimeline(r *request) (any, error) {
	limit := 100
	if v := r.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxTimelineLimit {
			return nil, badRequest("invalid limit %q: must be an integer between 1 and %d", v, maxTimelineLimit)
		}
		limit = n
	}
	tl, err := a.cfg.Instances.Timeline(r.UserContext(), r.Param("name"), limit)
	if err != nil {
		return nil, err
	}
	if tl == nil {
		tl = []instance.TimelineEntry{}
	}
	return instance.WireTimeline(tl), nil
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
func (a *API) listBackends(*request) (any, error) {
	list := a.cfg.Backends.List()
	out := make([]api.Backend, 0, len(list))
	for _, s := range list {
		out = append(out, backendOut(s))
	}
	slices.SortFunc(out, func(x, y api.Backend) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
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
