package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/redact"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/web/components"
)

func (d *Dashboard) meta(c *fiber.Ctx, title, active string) components.Meta {
	tok, _ := c.Locals(csrfKey).(string)
	who, _ := c.Locals(localWho).(string)
	return components.Meta{Title: title, Active: active, CSRF: tok, Who: who, LastEventID: d.lastEventID(), Stream: "view=none", Now: time.Now(), HeartbeatMS: d.cfg.Heartbeat.Milliseconds(), CanLaunch: d.cfg.Editor != nil, HasImages: d.cfg.Images != nil}
}

func render(c *fiber.Ctx, status int, comp templ.Component) error {
	c.Status(status)
	c.Type("html", "utf-8")
	c.Set("Cache-Control", "no-store")
	return comp.Render(c.UserContext(), c.Response().BodyWriter())
}

func (d *Dashboard) overview(c *fiber.Ctx) error {
	all, err := d.listRows(c.UserContext(), instance.ListFilter{})
	if err != nil {
		return d.fail(c, err)
	}
	data := components.OverviewData{Meta: d.meta(c, "Overview", "overview"), Total: len(all)}
	data.Stream = "view=overview"
	data.ByStatus, data.ByAgent = tally(all)
	data.Backends = d.backends()
	data.Recent = d.recentActivity(c.UserContext(), 20)
	data.Fleet = d.fleetReadiness(c.UserContext(), all, time.Now())
	return render(c, http.StatusOK, components.OverviewPage(data))
}

// tally counts instances by status and by agent badge.
func tally(all []*instance.Instance) (byStatus, byAgent []components.Count) {
	status := map[string]int{}
	agent := map[string]int{}
	for _, inst := range all {
		status[inst.Status]++
		w := instance.WireInstance(inst, nil)
		agent[components.AgentBadge(&w).Text]++
	}
	for _, s := range []string{"Ready", "Running", "Starting", "Stopping", "Stopped", "Error"} {
		byStatus = append(byStatus, components.Count{Label: s, N: status[s], Tone: quiet(status[s], components.StatusBadge(s).Tone), Href: "/instances?status=" + s})
	}
	agentFilter := map[string]string{"connected": "agent=connected", "started": "agent=started", "starting": "status=Running&agent=none", "lost": "agent=lost", "stopped": "agent=stopped", "none expected": "agent=none"}
	tone := map[string]components.Tone{"connected": components.ToneGood, "started": components.ToneWait, "starting": components.ToneWait, "lost": components.ToneBad, "stopped": components.ToneIdle, "none expected": components.ToneIdle}
	for _, a := range []string{"connected", "started", "starting", "lost", "stopped", "none expected"} {
		href := "/instances?" + agentFilter[a]
		byAgent = append(byAgent, components.Count{Label: a, N: agent[a], Tone: quiet(agent[a], tone[a]), Href: href})
	}
	return byStatus, byAgent
}

// quiet greys out the tiles of empty categories: a red "0 lost" alarms
// for nothing.
func quiet(n int, t components.Tone) components.Tone {
	if n == 0 {
		return components.ToneIdle
	}
	return t
}

func (d *Dashboard) backends() []components.BackendView {
	if d.cfg.Backends == nil {
		return nil
	}
	var out []components.BackendView
	for _, s := range d.cfg.Backends.List() {
		last := s.LastError
		if len(s.Missing) > 0 { // what an unhealthy plugin lacks, with the fix
			last = "cannot run guests: " + sdk.MissingText(s.Missing)
		}
		out = append(out, components.BackendView{Name: s.Name, Version: s.Version, Health: string(s.Health), Restarts: s.Restarts, LastError: last})
	}
	return out
}

// maxQuery bounds the free-text filter.
const maxQuery = 256

// parseFilter reads the instances table's filter, sort and page from get
// (the query string, or the form fields a bulk action carries back).
func parseFilter(get func(key string) string) (components.Filter, error) {
	f := components.Filter{
		Status:  get("status"),
		Agent:   get("agent"),
		Backend: get("backend"),
		Query:   strings.TrimSpace(get("q")),
		Sort:    get("sort"),
		Page:    1,
	}
	if f.Sort == "" {
		f.Sort = "name"
	}
	switch f.Status {
	case "", "Running", "Ready", "Stopped", "Error", "Starting", "Stopping":
	default:
		return f, fmt.Errorf("unknown status filter %q (Running, Ready, Stopped, Error, Starting, Stopping): %w", f.Status, errdefs.ErrInvalid)
	}
	switch f.Agent {
	case "", "connected", "started", "stopped", "lost", "none":
	default:
		return f, fmt.Errorf("unknown agent filter %q (connected, started, stopped, lost, none): %w", f.Agent, errdefs.ErrInvalid)
	}
	switch f.Sort {
	case "name", "status", "started", "ready":
	default:
		return f, fmt.Errorf("unknown sort %q (name, status, started, ready): %w", f.Sort, errdefs.ErrInvalid)
	}
	if len(f.Query) > maxQuery {
		return f, fmt.Errorf("search text of %d bytes is longer than %d: %w", len(f.Query), maxQuery, errdefs.ErrInvalid)
	}
	if len(f.Backend) > maxQuery {
		return f, fmt.Errorf("backend filter of %d bytes is longer than %d: %w", len(f.Backend), maxQuery, errdefs.ErrInvalid)
	}
	if p := get("page"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return f, fmt.Errorf("invalid page %q: want a positive integer: %w", p, errdefs.ErrInvalid)
		}
		f.Page = n
	}
	return f, nil
}

func (d *Dashboard) instances(c *fiber.Ctx) error {
	f, err := parseFilter(func(k string) string { return c.Query(k) })
	if err != nil {
		return d.fail(c, err)
	}
	data, err := d.instancesData(c, f)
	if err != nil {
		return d.fail(c, err)
	}
	return render(c, http.StatusOK, components.InstancesPage(data))
}

func (d *Dashboard) instancesData(c *fiber.Ctx, f components.Filter) (components.InstancesData, error) {
	// The service does the filtering: "Running" matches Ready instances
	// too and agent "none" matches instances without an agent.
	rows, err := d.listRows(c.UserContext(), instance.ListFilter{Status: f.Status, Backend: f.Backend, Agent: f.Agent, Query: f.Query})
	if err != nil {
		return components.InstancesData{}, err
	}
	sortRows(rows, f.Sort)
	data := components.InstancesData{Meta: d.meta(c, "Instances", "instances"), Filter: f, Total: len(rows)}
	size := d.cfg.PageSize
	data.Pages = (len(rows) + size - 1) / size
	if data.Pages == 0 {
		data.Pages = 1
	}
	if f.Page > data.Pages {
		data.Filter.Page = data.Pages
	}
	start := (data.Filter.Page - 1) * size
	end := min(start+size, len(rows))
	data.Rows = wireRows(rows[start:end])
	names := make([]string, len(data.Rows))
	for i, w := range data.Rows {
		names[i] = w.Name
	}
	data.Stream = d.listStream(data.Filter, names)
	for _, w := range data.Rows {
		d.withGuest(w)
	}
	for _, b := range d.backends() {
		data.Backends = append(data.Backends, b.Name)
	}
	return data, nil
}

// wireRows returns the API objects of rows, which the components render.
func wireRows(rows []*instance.Instance) []*api.Instance {
	out := make([]*api.Instance, len(rows))
	for i, inst := range rows {
		w := instance.WireInstance(inst, nil)
		out[i] = &w
	}
	return out
}

// sortRows orders rows, which the service returns sorted by name.
func sortRows(rows []*instance.Instance, by string) {
	var less func(a, b *instance.Instance) bool
	switch by {
	case "name", "":
		return
	case "status":
		less = func(a, b *instance.Instance) bool {
			if a.StatusCode != b.StatusCode {
				return a.StatusCode > b.StatusCode // Ready (113) first
			}
			return a.Name < b.Name
		}
	case "started":
		less = func(a, b *instance.Instance) bool {
			at, bt := a.StartedAt, b.StartedAt
			if (at == nil) != (bt == nil) {
				return at != nil
			}
			if at != nil && !at.Equal(*bt) {
				return at.After(*bt)
			}
			return a.Name < b.Name
		}
	case "ready":
		ttr := func(i *instance.Instance) time.Duration {
			if i.StartedAt == nil || i.ReadyAt == nil {
				return time.Duration(1<<63 - 1)
			}
			return i.ReadyAt.Sub(*i.StartedAt)
		}
		less = func(a, b *instance.Instance) bool {
			if x, y := ttr(a), ttr(b); x != y {
				return x < y
			}
			return a.Name < b.Name
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return less(rows[i], rows[j]) })
}

func (d *Dashboard) instancePage(c *fiber.Ctx) error {
	data, err := d.instanceData(c, c.Params("name"))
	if err != nil {
		return d.fail(c, err)
	}
	data.Console = d.consoleView(c.UserContext(), data.Inst.Name)
	return render(c, http.StatusOK, components.InstancePage(data))
}

func (d *Dashboard) instanceData(c *fiber.Ctx, name string) (components.InstanceData, error) {
	inst, err := d.cfg.Instances.Get(c.UserContext(), name)
	if err != nil {
		return components.InstanceData{}, err
	}
	entries, err := d.cfg.Instances.Timeline(c.UserContext(), name, 200)
	if err != nil {
		return components.InstanceData{}, err
	}
	w := instance.WireInstance(inst, nil)
	d.withFreshGuest(&w)
	data := components.InstanceData{Meta: d.meta(c, inst.Name, "instances"), Inst: &w, Editable: d.cfg.Editor != nil}
	data.Stream = instanceStream(inst.Name)
	data.Snapshots = d.snapshotsOf(c.UserContext(), inst.Name)
	data.Terminal = d.terminalView(&w)
	data.Download = d.downloadView(inst.Name)
	for i := len(entries) - 1; i >= 0; i-- { // newest first
		e := entries[i]
		data.Timeline = append(data.Timeline, components.TimelineItem{Time: e.Time, Boot: e.Boot, Kind: e.Kind, From: e.From, To: e.To, Cause: e.Cause, Detail: e.Detail})
	}
	data.Chart = components.BuildBootChart(inst.Name, data.Timeline, w.Status == "Running" || w.Status == "Ready", time.Now())
	return data, nil
}

// bootChart answers GET /instances/{name}/bootchart: the boot timeline
// chart alone, which the instance page fetches again after live updates.
func (d *Dashboard) bootChart(c *fiber.Ctx) error {
	data, err := d.instanceData(c, c.Params("name"))
	if err != nil {
		return d.fail(c, err)
	}
	return render(c, http.StatusOK, components.BootChartView(data.Chart))
}

// action runs one action on one instance and reports its outcome.
func (d *Dashboard) action(ctx context.Context, name, action string, by events.Requestor) components.Outcome {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.ActionTimeout)
	defer cancel()
	var err error
	switch action {
	case "start":
		err = d.cfg.Instances.Start(ctx, name, by)
	case "stop":
		err = d.cfg.Instances.Stop(ctx, name, instance.StopOptions{}, by)
	case "force-stop":
		err = d.cfg.Instances.Stop(ctx, name, instance.StopOptions{Force: true}, by)
	case "restart":
		err = d.cfg.Instances.Restart(ctx, name, instance.StopOptions{}, by)
	default:
		err = fmt.Errorf("unknown action %q (start, stop, force-stop, restart): %w", action, errdefs.ErrInvalid)
	}
	o := components.Outcome{Name: name, Action: action}
	if err != nil {
		o.Err = d.errorText("/instances/"+name+" "+action, err)
	}
	return o
}

func (d *Dashboard) instanceAction(c *fiber.Ctx) error {
	name := c.Params("name")
	o := d.action(c.UserContext(), name, c.FormValue("action"), requestor(c))
	data, err := d.instanceData(c, name)
	if err != nil {
		return d.fail(c, err)
	}
	data.Outcomes = []components.Outcome{o}
	data.Console = d.consoleView(c.UserContext(), data.Inst.Name)
	status := http.StatusOK
	if o.Err != "" {
		status = http.StatusUnprocessableEntity
	}
	return render(c, status, components.InstancePage(data))
}

// bulkAction runs an action on every selected instance, one after the
// other, and shows each instance's outcome above the table as it was
// filtered (the form carries the filter back).
func (d *Dashboard) bulkAction(c *fiber.Ctx) error {
	f, err := parseFilter(func(k string) string { return c.FormValue(k) })
	if err != nil {
		return d.fail(c, err)
	}
	action := c.FormValue("action")
	var names []string
	if form, err := c.MultipartForm(); err == nil {
		names = form.Value["names"]
	} else {
		for _, v := range c.Request().PostArgs().PeekMulti("names") {
			names = append(names, string(v))
		}
	}
	var outcomes []components.Outcome
	if len(names) == 0 {
		outcomes = append(outcomes, components.Outcome{Action: action, Err: "no instance selected"})
	}
	by := requestor(c)
	failed := false
	for _, n := range names {
		o := d.action(c.UserContext(), n, action, by)
		failed = failed || o.Err != ""
		outcomes = append(outcomes, o)
	}
	data, err := d.instancesData(c, f)
	if err != nil {
		return d.fail(c, err)
	}
	data.Outcomes = outcomes
	status := http.StatusOK
	if len(names) == 0 || (failed && len(names) == 1) {
		status = http.StatusUnprocessableEntity
	}
	return render(c, status, components.InstancesPage(data))
}

// fail answers a page request that could not be served with a plain page and
// the status the error kind maps to, its message as errorText gives it.
func (d *Dashboard) fail(c *fiber.Ctx, err error) error {
	status := errdefs.HTTPStatus(err)
	c.Status(status)
	c.Type("txt", "utf-8")
	return c.SendString(http.StatusText(status) + ": " + d.errorText(c.Path(), err) + "\n")
}

// errorText is the message of err a page shows. An error of a server-side
// kind (5xx) never shows a host path (core/redact): an unexpected one, or
// one whose message had a path removed, is logged in full under a request
// id the page shows. where names the page or route for the log.
func (d *Dashboard) errorText(where string, err error) string {
	msg := err.Error()
	if errdefs.HTTPStatus(err) < http.StatusInternalServerError || errors.Is(err, context.Canceled) {
		return msg
	}
	if red := redact.Paths(msg); red != msg || errdefs.HTTPStatus(err) == http.StatusInternalServerError {
		id := redact.NewRequestID()
		d.log.Error("dashboard request failed", "request_id", id, "path", where, "err", err)
		return redact.Message(msg, id)
	}
	return msg
}
