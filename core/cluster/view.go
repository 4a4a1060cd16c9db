package cluster

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/membership"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/errdefs"
)

// Internal routes of the cluster listener, served to members only: this
// member's own instances, as api.Instance objects (wire.go).
const (
	InstancesPath = "/internal/cluster/instances"
)

// StatusUnknown is the status of an instance whose member is offline or
// did not answer; its code is UnknownCode.
const (
	StatusUnknown = "Unknown"
	UnknownCode   = 0
)

// Instances is the instance service of a member: its own instances come
// from the local manager, the others from their members (over the cluster
// link) or, when a member is offline, from the database with status
// Unknown. Every other method is the local manager's (the API forwards
// requests about other members' instances before they reach it).
type Instances struct {
	*instance.Manager
	c *Cluster
}

// NewInstances wraps a member's manager.
func NewInstances(c *Cluster, m *instance.Manager) *Instances {
	return &Instances{Manager: m, c: c}
}

// localKey marks a context whose list must hold this member's instances
// only (a member asking for its part of a cluster-wide list).
type localKey struct{}

// WithLocalOnly marks ctx so that List and ListFunc return this member's
// instances only.
func WithLocalOnly(ctx context.Context) context.Context {
	return context.WithValue(ctx, localKey{}, true)
}

func localOnly(ctx context.Context) bool { b, _ := ctx.Value(localKey{}).(bool); return b }

// List returns every instance of the cluster matching f, by name.
func (v *Instances) List(ctx context.Context, f instance.ListFilter) ([]*instance.Instance, error) {
	if localOnly(ctx) {
		return v.Manager.List(ctx, f)
	}
	return v.all(ctx, f)
}

// ListFunc is List, one instance at a time.
func (v *Instances) ListFunc(ctx context.Context, f instance.ListFilter, fn func(*instance.Instance) error) error {
	if localOnly(ctx) {
		return v.Manager.ListFunc(ctx, f, fn)
	}
	list, err := v.all(ctx, f)
	if err != nil {
		return err
	}
	for _, inst := range list {
		if err := fn(inst); err != nil {
			return err
		}
	}
	return nil
}

// ListCachedFunc is ListFunc for the admin API's list, which keeps each
// instance's encoding in its cache slot (instance.Manager.ListCachedFunc,
// which this type would otherwise promote, listing this member's instances
// only): local-only, the manager's slots; cluster-wide, each instance gets
// a slot of its own (instance.RowOf) and is encoded each time.
func (v *Instances) ListCachedFunc(ctx context.Context, f instance.ListFilter, fn func([]instance.CachedRow) error) error {
	if localOnly(ctx) {
		return v.Manager.ListCachedFunc(ctx, f, fn)
	}
	return v.ListFunc(ctx, f, func(inst *instance.Instance) error {
		return fn([]instance.CachedRow{instance.RowOf(inst, 0, new(instance.ViewCache))})
	})
}

// all merges the local list with every other member's.
func (v *Instances) all(ctx context.Context, f instance.ListFilter) ([]*instance.Instance, error) {
	local, err := v.Manager.List(ctx, f)
	if err != nil {
		return nil, err
	}
	members, err := v.c.cfg.Store.Members(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing instances: %w", err)
	}
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = local
	)
	now := time.Now()
	for _, m := range members {
		if m.Name == v.c.cfg.Name {
			continue
		}
		wg.Go(func() {
			var part []*instance.Instance
			var reason string
			if !v.c.online(m, now) {
				reason = fmt.Sprintf("member %s is offline (last heartbeat %s)", m.Name, m.Heartbeat.UTC().Format(time.RFC3339))
			} else if m.Address == "" {
				reason = fmt.Sprintf("member %s has no cluster address", m.Name)
			} else {
				got, err := v.fetch(ctx, m, f)
				if err == nil {
					part = got
				} else {
					reason = err.Error()
				}
			}
			if reason != "" {
				part, err = v.stored(ctx, m.Name, reason, f)
				if err != nil {
					v.c.log.Error("listing the instances of an unreachable member", "member", m.Name, "err", err)
				}
			}
			mu.Lock()
			out = append(out, part...)
			mu.Unlock()
		})
	}
	// Instances recorded at a member that is gone (removed with --force)
	// show Unknown too, never vanish.
	wg.Go(func() {
		part, err := v.orphans(ctx, members, f)
		if err != nil {
			v.c.log.Error("listing the instances of removed members", "err", err)
		}
		mu.Lock()
		out = append(out, part...)
		mu.Unlock()
	})
	wg.Wait()
	slices.SortFunc(out, func(a, b *instance.Instance) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// orphans returns the instances recorded at members that are not in the
// cluster (removed), status Unknown.
func (v *Instances) orphans(ctx context.Context, members []*membership.Member, f instance.ListFilter) ([]*instance.Instance, error) {
	counts, err := v.c.cfg.Store.InstanceCounts(ctx)
	if err != nil {
		return nil, err
	}
	var out []*instance.Instance
	for loc := range counts {
		if loc == "" || loc == v.c.cfg.Name || slices.ContainsFunc(members, func(m *membership.Member) bool { return m.Name == loc }) {
			continue
		}
		part, err := v.stored(ctx, loc, removedReason(loc), f)
		if err != nil {
			return out, err
		}
		out = append(out, part...)
	}
	return out, nil
}

// removedReason is the status reason of an instance whose member is gone.
func removedReason(member string) string {
	return fmt.Sprintf("member %s was removed from the cluster (its instances stay recorded at it until deleted or until a daemon joins as %s)", member, member)
}

// fetch asks member m for its instances matching f.
func (v *Instances) fetch(ctx context.Context, m *membership.Member, f instance.ListFilter) ([]*instance.Instance, error) {
	q := url.Values{}
	for k, val := range map[string]string{"status": f.Status, "backend": f.Backend, "agent": f.Agent, "q": f.Query} {
		if val != "" {
			q.Set(k, val)
		}
	}
	var out []*instance.Instance
	err := v.get(ctx, m.Name, m.Address, InstancesPath+"?"+q.Encode(), func(r io.Reader) (err error) {
		out, err = decodeInstances(r)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// get GETs path on a member and reads its answer with decode.
func (v *Instances) get(ctx context.Context, name, addr, path string, decode func(io.Reader) error) error {
	budget := v.c.cfg.ForwardTimeout
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+path, nil)
	if err != nil {
		return err
	}
	SetDeadline(req.Header, time.Now().Add(budget))
	res, err := v.c.client(name, addr).Do(req)
	if err != nil {
		return trimOffline(NotAnswered(name, budget, err))
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusNotFound {
		return errdefs.ErrNotFound
	}
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		return fmt.Errorf("%s answered %d: %s", name, res.StatusCode, b)
	}
	return decode(res.Body)
}

// stored returns a member's instances as the database has them, status
// Unknown with reason.
func (v *Instances) stored(ctx context.Context, member, reason string, f instance.ListFilter) ([]*instance.Instance, error) {
	recs, err := v.c.cfg.Store.StoredInstances(ctx, member, f.Backend)
	if err != nil {
		return nil, err
	}
	if f.Status != "" {
		if _, err := status.Parse(f.Status); err != nil {
			return nil, err
		}
	}
	out := make([]*instance.Instance, 0, len(recs))
	for _, rec := range recs {
		// An Unknown status matches no status filter, nor an agent filter.
		if f.Status != "" || f.Agent != "" {
			continue
		}
		if f.Query != "" && !containsFold(rec.Name, f.Query) {
			continue
		}
		out = append(out, unknownView(rec, reason))
	}
	return out, nil
}

// unknownView is the view of a stored instance (StoredInstance) whose
// member cannot say how it is.
func unknownView(inst *instance.Instance, reason string) *instance.Instance {
	inst.Status, inst.StatusCode, inst.StatusReason = StatusUnknown, UnknownCode, reason
	inst.Agent = instance.AgentInfo{}
	inst.Conditions = nil
	return inst
}

// Get returns an instance of any member.
func (v *Instances) Get(ctx context.Context, name string) (*instance.Instance, error) {
	inst, err := v.Manager.Get(ctx, name)
	if err == nil || !errors.Is(err, errdefs.ErrNotFound) || localOnly(ctx) {
		return inst, err
	}
	rec, serr := v.c.cfg.Store.StoredInstance(ctx, name)
	if serr != nil || rec.Location == "" || rec.Location == v.c.cfg.Name {
		return nil, err
	}
	m, merr := v.c.cfg.Store.Member(ctx, rec.Location)
	if merr != nil {
		return unknownView(rec, removedReason(rec.Location)), nil
	}
	if !v.c.online(m, time.Now()) {
		return unknownView(rec, fmt.Sprintf("member %s is offline (last heartbeat %s)", m.Name, m.Heartbeat.UTC().Format(time.RFC3339))), nil
	}
	var out *instance.Instance
	gerr := v.get(ctx, m.Name, m.Address, InstancesPath+"/"+url.PathEscape(name), func(r io.Reader) (err error) {
		out, err = decodeInstance(r)
		return err
	})
	if gerr != nil {
		if errors.Is(gerr, errdefs.ErrNotFound) {
			return nil, err
		}
		return unknownView(rec, gerr.Error()), nil
	}
	return out, nil
}

// Timeline returns an instance's timeline: another member's instances
// are read from the store (their member writes it there).
func (v *Instances) Timeline(ctx context.Context, name string, limit int) ([]instance.TimelineEntry, error) {
	tl, err := v.Manager.Timeline(ctx, name, limit)
	if err == nil || !errors.Is(err, errdefs.ErrNotFound) || localOnly(ctx) {
		return tl, err
	}
	return v.Manager.StoredTimeline(ctx, name, limit)
}

// Start starts an instance of any member (another member's is started by
// that member, as a forwarded API request would).
func (v *Instances) Start(ctx context.Context, name string, by events.Requestor) error {
	if m, ok := v.owner(ctx, name); ok {
		return v.setState(ctx, m, name, map[string]any{"action": "start"}, by)
	}
	return v.Manager.Start(ctx, name, by)
}

// Stop stops an instance of any member.
func (v *Instances) Stop(ctx context.Context, name string, opts instance.StopOptions, by events.Requestor) error {
	if m, ok := v.owner(ctx, name); ok {
		return v.setState(ctx, m, name, stateBody("stop", opts), by)
	}
	return v.Manager.Stop(ctx, name, opts, by)
}

// Restart restarts an instance of any member.
func (v *Instances) Restart(ctx context.Context, name string, opts instance.StopOptions, by events.Requestor) error {
	if m, ok := v.owner(ctx, name); ok {
		return v.setState(ctx, m, name, stateBody("restart", opts), by)
	}
	return v.Manager.Restart(ctx, name, opts, by)
}

func stateBody(action string, o instance.StopOptions) map[string]any {
	body := map[string]any{"action": action, "force": o.Force, "stateful": o.Stateful}
	if o.Timeout > 0 {
		body["timeout"] = int(o.Timeout.Seconds())
	}
	return body
}

// owner returns the member of an instance this member does not run.
func (v *Instances) owner(ctx context.Context, name string) (string, bool) {
	if localOnly(ctx) {
		return "", false
	}
	if _, err := v.Manager.Get(ctx, name); err == nil {
		return "", false
	}
	rec, err := v.c.cfg.Store.StoredInstance(ctx, name)
	if err != nil || rec.Location == "" || rec.Location == v.c.cfg.Name {
		return "", false
	}
	return rec.Location, true
}

// setState sends PUT /1.0/instances/{name}/state to member m on behalf of by.
func (v *Instances) setState(ctx context.Context, member, name string, body map[string]any, by events.Requestor) error {
	client, base, err := v.c.Reach(ctx, member)
	if err != nil {
		return fmt.Errorf("%s: %w", strings.TrimSuffix(err.Error(), ": "+ErrOffline.Error()), errdefs.ErrUnavailable)
	}
	budget := v.c.cfg.ForwardTimeout + StateAllowance
	if t, ok := body["timeout"].(int); ok {
		budget = v.c.cfg.ForwardTimeout + time.Duration(t)*time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	raw, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/1.0/instances/"+url.PathEscape(name)+"/state", bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderRequestor, RequestorHeader(by))
	req.Header.Set(HeaderForwardedBy, v.c.cfg.Name)
	SetDeadline(req.Header, time.Now().Add(budget))
	res, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %w", trimOffline(NotAnswered(member, budget, err)), errdefs.ErrUnavailable)
	}
	defer res.Body.Close()
	if res.StatusCode/100 == 2 {
		return nil
	}
	var env struct {
		Error string `json:"error"`
	}
	_ = json.NewDecoder(io.LimitReader(res.Body, 1<<16)).Decode(&env)
	return fmt.Errorf("member %s: %s: %w", member, env.Error, errdefs.FromHTTPStatus(res.StatusCode))
}

// trimOffline drops ErrOffline's text from err (its message is for people).
func trimOffline(err error) error {
	return errors.New(strings.TrimSuffix(err.Error(), ": "+ErrOffline.Error()))
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}
