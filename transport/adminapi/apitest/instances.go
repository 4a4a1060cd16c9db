package apitest

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/transport/adminapi"
)

// Instances is an in-memory instance service with the manager's contract:
// Start on a running instance and Delete of a running one without force are
// errdefs.ErrConflict, unknown names errdefs.ErrNotFound, duplicates
// errdefs.ErrAlreadyExists, unknown config keys errdefs.ErrInvalid. Every
// change publishes its lifecycle event and adds a timeline entry.
type Instances struct {
	bus *events.Bus
	dir string

	mu       sync.Mutex
	items    map[string]*instance.Instance
	timeline map[string][]instance.TimelineEntry
	lastBy   events.Requestor

	// Images resolves CreateRequest.Image when set (NewServer sets it to
	// Options.Images); without it the image is recorded as given.
	Images adminapi.ImageService
}

// NewInstances returns an empty service publishing on bus; simulated
// guests' devlxd sockets are placed under dir.
func NewInstances(bus *events.Bus, dir string) *Instances {
	return &Instances{
		bus:      bus,
		dir:      dir,
		items:    make(map[string]*instance.Instance),
		timeline: make(map[string][]instance.TimelineEntry),
	}
}

// knownKey reports whether the fake accepts a config key.
func knownKey(k string) bool {
	for _, p := range []string{"user.", "cloud-init.", "sim.", "qemu.", "limits.", "volatile."} {
		if strings.HasPrefix(k, p) && len(k) > len(p) {
			return true
		}
	}
	return k == "security.devlxd"
}

// LastRequestor returns the requestor of the latest change.
func (s *Instances) LastRequestor() events.Requestor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastBy
}

// publish sends a lifecycle event for name.
func (s *Instances) publish(action, name string, by *events.Requestor) {
	_, _ = s.bus.Publish(context.Background(), events.NewLifecycle(action, name, nil, by))
}

// setStatusLocked sets the status of inst and records the change.
func (s *Instances) setStatusLocked(inst *instance.Instance, code status.Code, cause string) {
	s.timeline[inst.Name] = append(s.timeline[inst.Name], instance.TimelineEntry{
		Time: time.Now().UTC(), Boot: inst.Boot, Kind: "state", From: inst.Status, To: code.String(), Cause: cause,
	})
	inst.Status, inst.StatusCode = code.String(), int(code)
}

// cloneInst returns a copy the caller may keep.
func cloneInst(in *instance.Instance) *instance.Instance {
	c := *in
	c.Config = maps.Clone(in.Config)
	c.Devices = maps.Clone(in.Devices)
	return &c
}

// Create adds a stopped instance (started if req.Start).
func (s *Instances) Create(ctx context.Context, req instance.CreateRequest, by events.Requestor) (*instance.Instance, error) {
	for k := range req.Config {
		if !knownKey(k) {
			return nil, fmt.Errorf("creating instance %q: unknown config key %q: %w", req.Name, k, errdefs.ErrInvalid)
		}
	}
	s.mu.Lock()
	if _, ok := s.items[req.Name]; ok {
		s.mu.Unlock()
		return nil, fmt.Errorf("creating instance %q: %w", req.Name, errdefs.ErrAlreadyExists)
	}
	cfg := maps.Clone(req.Config)
	if cfg == nil {
		cfg = map[string]string{}
	}
	if req.Backend == "" {
		req.Backend = "sim" // the test daemon's default backend
	}
	uuid := fmt.Sprintf("00000000-0000-4000-8000-%012d", len(s.items)+1)
	cfg["volatile.uuid"] = uuid
	if req.Image != "" {
		cfg["volatile.base_image"] = req.Image
		if s.Images != nil {
			im, err := s.Images.Resolve(ctx, req.Image)
			if err != nil {
				s.mu.Unlock()
				return nil, fmt.Errorf("creating instance %q: %w", req.Name, err)
			}
			cfg["volatile.base_image"] = im.Fingerprint
		}
	}
	inst := &instance.Instance{
		Name:      req.Name,
		UUID:      uuid,
		Backend:   req.Backend,
		Config:    cfg,
		Devices:   maps.Clone(req.Devices),
		CreatedAt: time.Now().UTC(),
		Status:    status.Stopped.String(), StatusCode: int(status.Stopped),
	}
	if inst.Devices == nil {
		inst.Devices = map[string]map[string]string{}
	}
	s.items[req.Name] = inst
	s.lastBy = by
	s.mu.Unlock()
	s.publish(events.InstanceCreated, req.Name, &by)
	if req.Start {
		if err := s.Start(ctx, req.Name, by); err != nil {
			return nil, err
		}
	}
	return s.Get(ctx, req.Name)
}

// Get returns one instance.
func (s *Instances) Get(_ context.Context, name string) (*instance.Instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	inst, ok := s.items[name]
	if !ok {
		return nil, fmt.Errorf("instance %q: %w", name, errdefs.ErrNotFound)
	}
	return cloneInst(inst), nil
}

// List returns the instances matching f, sorted by name. Status "Running"
// includes Ready instances.
func (s *Instances) List(_ context.Context, f instance.ListFilter) ([]*instance.Instance, error) {
	var want status.Code
	if f.Status != "" {
		c, err := status.Parse(f.Status)
		if err != nil {
			return nil, fmt.Errorf("listing instances: %w", err)
		}
		want = c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []*instance.Instance{}
	for _, inst := range s.items {
		code := status.Code(inst.StatusCode)
		switch {
		case f.Status != "" && want == status.Running && !status.IsRunning(code):
			continue
		case f.Status != "" && want != status.Running && code != want:
			continue
		case f.Backend != "" && inst.Backend != f.Backend:
			continue
		case f.Agent == "none" && inst.Agent.State != instance.AgentNone,
			f.Agent != "" && f.Agent != "none" && string(inst.Agent.State) != f.Agent:
			continue
		case f.Query != "" && !strings.Contains(inst.Name, f.Query):
			continue
		}
		out = append(out, cloneInst(inst))
	}
	slices.SortFunc(out, func(a, b *instance.Instance) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Start starts a stopped instance.
func (s *Instances) Start(_ context.Context, name string, by events.Requestor) error {
	s.mu.Lock()
	inst, ok := s.items[name]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("starting instance %q: %w", name, errdefs.ErrNotFound)
	}
	if status.IsRunning(status.Code(inst.StatusCode)) {
		s.mu.Unlock()
		return fmt.Errorf("starting instance %q: already running: %w", name, errdefs.ErrConflict)
	}
	now := time.Now().UTC()
	inst.Boot++
	inst.StartedAt = &now
	inst.Link = "hybrid"
	if inst.Backend == "sim" {
		inst.DevlxdSocket = filepath.Join(s.dir, "instances", name, "dev", "lxd", "sock")
	}
	s.setStatusLocked(inst, status.Running, "api")
	s.lastBy = by
	s.mu.Unlock()
	s.publish(events.InstanceStarted, name, &by)
	return nil
}

// SetReady marks a running instance Ready, with its agent connected, as the
// devlxd handlers would.
func (s *Instances) SetReady(name string) error {
	s.mu.Lock()
	inst, ok := s.items[name]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("marking instance %q ready: %w", name, errdefs.ErrNotFound)
	}
	if !status.IsRunning(status.Code(inst.StatusCode)) {
		s.mu.Unlock()
		return fmt.Errorf("marking instance %q ready: not running: %w", name, errdefs.ErrConflict)
	}
	now := time.Now().UTC()
	inst.Config["volatile.last_state.ready"] = "true"
	inst.ReadyAt = &now
	inst.Agent = instance.AgentInfo{State: instance.AgentConnected, LastHeartbeat: &now, Since: &now}
	s.timeline[name] = append(s.timeline[name], instance.TimelineEntry{
		Time: now, Boot: inst.Boot, Kind: "ready", From: "false", To: "true", Cause: "devlxd",
	})
	s.setStatusLocked(inst, status.Ready, "devlxd")
	s.mu.Unlock()
	s.publish(events.InstanceReady, name, &events.Requestor{Protocol: "devlxd"})
	return nil
}

// stopLocked stops a running instance.
func (s *Instances) stopLocked(inst *instance.Instance, cause string) {
	delete(inst.Config, "volatile.last_state.ready")
	inst.Agent = instance.AgentInfo{}
	inst.Link = ""
	inst.DevlxdSocket = ""
	inst.ReadyAt = nil
	s.setStatusLocked(inst, status.Stopped, cause)
}

// Stop stops a running instance; stateful stops are not supported.
func (s *Instances) Stop(_ context.Context, name string, opts instance.StopOptions, by events.Requestor) error {
	if opts.Stateful {
		return fmt.Errorf("stopping instance %q statefully: %w", name, errdefs.ErrNotSupported)
	}
	s.mu.Lock()
	inst, ok := s.items[name]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("stopping instance %q: %w", name, errdefs.ErrNotFound)
	}
	if !status.IsRunning(status.Code(inst.StatusCode)) {
		s.mu.Unlock()
		return fmt.Errorf("stopping instance %q: not running: %w", name, errdefs.ErrConflict)
	}
	s.stopLocked(inst, "api")
	s.lastBy = by
	s.mu.Unlock()
	s.publish(events.InstanceStopped, name, &by)
	return nil
}

// Restart stops (if running) and starts an instance.
func (s *Instances) Restart(ctx context.Context, name string, opts instance.StopOptions, by events.Requestor) error {
	if opts.Stateful {
		return fmt.Errorf("restarting instance %q statefully: %w", name, errdefs.ErrNotSupported)
	}
	s.mu.Lock()
	inst, ok := s.items[name]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("restarting instance %q: %w", name, errdefs.ErrNotFound)
	}
	if status.IsRunning(status.Code(inst.StatusCode)) {
		s.stopLocked(inst, "api")
	}
	s.mu.Unlock()
	if err := s.Start(ctx, name, by); err != nil {
		return fmt.Errorf("restarting instance %q: %w", name, err)
	}
	s.publish(events.InstanceRestarted, name, &by)
	return nil
}

// Delete removes an instance; a running one only with force.
func (s *Instances) Delete(_ context.Context, name string, force bool, by events.Requestor) error {
	s.mu.Lock()
	inst, ok := s.items[name]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("deleting instance %q: %w", name, errdefs.ErrNotFound)
	}
	if status.IsRunning(status.Code(inst.StatusCode)) && !force {
		s.mu.Unlock()
		return fmt.Errorf("deleting instance %q: running, stop it first or force: %w", name, errdefs.ErrConflict)
	}
	delete(s.items, name)
	delete(s.timeline, name)
	s.lastBy = by
	s.mu.Unlock()
	s.publish(events.InstanceDeleted, name, &by)
	return nil
}

// UpdateConfig sets and unsets config keys.
func (s *Instances) UpdateConfig(_ context.Context, name string, set map[string]string, unset []string, by events.Requestor) (*instance.Instance, error) {
	for _, k := range slices.Concat(slices.Collect(maps.Keys(set)), unset) {
		if !knownKey(k) {
			return nil, fmt.Errorf("updating instance %q: unknown config key %q: %w", name, k, errdefs.ErrInvalid)
		}
	}
	s.mu.Lock()
	inst, ok := s.items[name]
	if !ok {
		s.mu.Unlock()
		return nil, fmt.Errorf("updating instance %q: %w", name, errdefs.ErrNotFound)
	}
	maps.Copy(inst.Config, set)
	for _, k := range unset {
		delete(inst.Config, k)
	}
	s.lastBy = by
	out := cloneInst(inst)
	s.mu.Unlock()
	s.publish(events.InstanceUpdated, name, &by)
	return out, nil
}

// Timeline returns the latest limit entries, oldest first.
func (s *Instances) Timeline(_ context.Context, name string, limit int) ([]instance.TimelineEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.items[name]; !ok {
		return nil, fmt.Errorf("reading timeline of instance %q: %w", name, errdefs.ErrNotFound)
	}
	tl := s.timeline[name]
	if limit > 0 && len(tl) > limit {
		tl = tl[len(tl)-limit:]
	}
	return slices.Clone(tl), nil
}

var _ adminapi.Instances = (*Instances)(nil)
