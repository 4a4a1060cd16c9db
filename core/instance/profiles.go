package instance

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// DefaultProfile is the profile made at first start and applied to new
// instances that name no profiles (as LXD's). It cannot be deleted or
// renamed.
const DefaultProfile = "default"

// DefaultProfileDevices are the devices of the default profile when it is
// made: a root disk and a user-mode NIC eth0, as an LXD user expects of a
// new VM.
func DefaultProfileDevices() map[string]map[string]string {
	return map[string]map[string]string{
		"root": {"type": "disk", "path": "/"},
		"eth0": {"type": "nic", "nictype": "user", "name": "eth0"},
	}
}

// Profile is a named set of config keys and devices applied to instances
// before their own keys (LXD's layering).
type Profile struct {
	Name        string
	Description string
	Config      map[string]string
	Devices     map[string]map[string]string
	// UsedBy lists the instances that apply the profile, by name.
	UsedBy []string
}

// ProfilePut is the writable part of a profile: a PUT replaces all of it.
type ProfilePut struct {
	Description string
	Config      map[string]string
	Devices     map[string]map[string]string
}

// ValidateProfileName checks a profile name: 1 to 63 letters, digits, '-',
// '_' or '.', not "." or "..". Errors wrap errdefs.ErrInvalid.
func ValidateProfileName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("invalid profile name: the name is empty: %w", errdefs.ErrInvalid)
	case len(name) > 63:
		return fmt.Errorf("invalid profile name %q: longer than 63 characters (%d): %w", name, len(name), errdefs.ErrInvalid)
	case name == "." || name == "..":
		return fmt.Errorf("invalid profile name %q: %w", name, errdefs.ErrInvalid)
	}
	for i, r := range name {
		if r != '-' && r != '_' && r != '.' && (r < '0' || r > '9') && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') {
			return fmt.Errorf("invalid profile name %q: character %q at position %d is not a letter, digit, '-', '_' or '.': %w", name, r, i, errdefs.ErrInvalid)
		}
	}
	return nil
}

// profileStore returns the store's profiles (errdefs.ErrNotSupported when
// the store keeps none: some test stores), with the default profile made
// (at Init; a manager used without Init makes it at its first use).
func (m *Manager) profileStore(ctx context.Context) (record.ProfileStore, error) {
	ps, ok := m.store.(record.ProfileStore)
	if !ok {
		return nil, fmt.Errorf("this daemon's store keeps no profiles: %w", errdefs.ErrNotSupported)
	}
	if err := m.ensureDefaultProfile(ctx); err != nil {
		return nil, err
	}
	return ps, nil
}

// ensureDefaultProfile makes the default profile unless it exists (first
// start; another cluster member making it at the same time is fine).
func (m *Manager) ensureDefaultProfile(ctx context.Context) error {
	ps, ok := m.store.(record.ProfileStore)
	if !ok || m.defaultProfile.Load() {
		return nil
	}
	if _, err := ps.Profile(ctx, DefaultProfile); err == nil || !errors.Is(err, errdefs.ErrNotFound) {
		if err == nil {
			m.defaultProfile.Store(true)
		}
		return storeErr(err)
	}
	err := ps.CreateProfile(ctx, &record.Profile{
		Name:        DefaultProfile,
		Description: "Default guestlink profile",
		Devices:     DefaultProfileDevices(),
	})
	if err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) {
		return fmt.Errorf("creating the default profile: %w", storeErr(err))
	}
	m.defaultProfile.Store(true)
	m.log.Info("default profile created", "devices", "root (disk /), eth0 (nic, nictype=user)")
	return nil
}

// validateProfile checks the config keys and devices of a profile. Keys are
// those an instance accepts; a key under a prefix the daemon does not know
// (qemu.memory, sim.x) is a backend's, checked by the backend of each
// instance at launch. volatile.* keys are an instance's own.
func validateProfile(ctx context.Context, name string, p ProfilePut, dc deviceConfig) error {
	if err := checkChangeSize(len(p.Config) + len(p.Devices)); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(p.Config)) {
		v := p.Config[k]
		if strings.HasPrefix(k, "volatile.") {
			return fmt.Errorf("configuration key %q: volatile keys belong to an instance, not to a profile: %w", k, errdefs.ErrInvalid)
		}
		var owner []string
		if i := strings.IndexByte(k, '.'); i > 0 {
			owner = []string{k[:i+1]}
		}
		// A profile names no backend: a backend's key is judged by its
		// prefix here, by the backend's schema when an instance uses it.
		if err := validateKey(k, v, v == "", backendKeys{info: &contract.Info{ConfigPrefixes: owner}}); err != nil {
			return err
		}
	}
	for _, d := range slices.Sorted(maps.Keys(p.Devices)) {
		if err := ValidateDevice(ctx, d, p.Devices[d], dc.volumes, dc.allowPaths); err != nil {
			return err
		}
	}
	return nil
}

// usedBy returns the instances (every cluster member's) that apply each
// profile, by profile name.
func (m *Manager) usedBy(ctx context.Context) (map[string][]string, error) {
	recs, err := m.store.ListInstances(ctx, record.Filter{})
	if err != nil {
		return nil, fmt.Errorf("listing instances: %w", storeErr(err))
	}
	out := map[string][]string{}
	for _, r := range recs {
		for _, p := range r.Profiles {
			out[p] = append(out[p], r.Name)
		}
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out, nil
}

func profileOf(p *record.Profile, used []string) *Profile {
	return &Profile{Name: p.Name, Description: p.Description, Config: maps.Clone(p.Config), Devices: cloneDevices(p.Devices), UsedBy: slices.Clone(used)}
}

// Profiles returns every profile by name with the instances using it.
func (m *Manager) Profiles(ctx context.Context) ([]*Profile, error) {
	ps, err := m.profileStore(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing profiles: %w", err)
	}
	list, err := ps.Profiles(ctx)
	if err != nil {
		return nil, storeErr(err)
	}
	used, err := m.usedBy(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing profiles: %w", err)
	}
	out := make([]*Profile, len(list))
	for i, p := range list {
		out[i] = profileOf(p, used[p.Name])
	}
	return out, nil
}

// Profile returns one profile (errdefs.ErrNotFound).
func (m *Manager) Profile(ctx context.Context, name string) (*Profile, error) {
	ps, err := m.profileStore(ctx)
	if err != nil {
		return nil, fmt.Errorf("getting profile %q: %w", name, err)
	}
	p, err := ps.Profile(ctx, name)
	if err != nil {
		return nil, storeErr(err)
	}
	used, err := m.usedBy(ctx)
	if err != nil {
		return nil, fmt.Errorf("getting profile %q: %w", name, err)
	}
	return profileOf(p, used[name]), nil
}

// CreateProfile makes a profile: a bad name, key or device is
// errdefs.ErrInvalid, a taken name errdefs.ErrAlreadyExists.
func (m *Manager) CreateProfile(ctx context.Context, name string, p ProfilePut) (*Profile, error) {
	wrap := func(err error) error { return fmt.Errorf("creating profile %q: %w", name, err) }
	if err := ValidateProfileName(name); err != nil {
		return nil, fmt.Errorf("creating profile: %w", err)
	}
	if err := validateProfile(ctx, name, p, m.devices); err != nil {
		return nil, wrap(err)
	}
	ps, err := m.profileStore(ctx)
	if err != nil {
		return nil, wrap(err)
	}
	rec := &record.Profile{Name: name, Description: p.Description, Config: dropEmpty(p.Config), Devices: cloneDevices(p.Devices)}
	if err := ps.CreateProfile(ctx, rec); err != nil {
		return nil, storeErr(err) // the store names the profile
	}
	m.cacheProfiles(rec)
	return profileOf(rec, nil), nil
}

// UpdateProfile replaces a profile's description, config and devices. The
// instances using it see the change at their next start (the backend is
// given the expanded config and devices then), as LXD applies a profile
// change that cannot be made live; each running one gets instance-updated
// so watchers know. An unknown profile is errdefs.ErrNotFound.
func (m *Manager) UpdateProfile(ctx context.Context, name string, p ProfilePut, by events.Requestor) (*Profile, error) {
	wrap := func(err error) error { return fmt.Errorf("updating profile %q: %w", name, err) }
	if err := validateProfile(ctx, name, p, m.devices); err != nil {
		return nil, wrap(err)
	}
	ps, err := m.profileStore(ctx)
	if err != nil {
		return nil, wrap(err)
	}
	rec := &record.Profile{Name: name, Description: p.Description, Config: dropEmpty(p.Config), Devices: cloneDevices(p.Devices)}
	if err := ps.UpdateProfile(ctx, rec); err != nil {
		return nil, storeErr(err)
	}
	m.cacheProfiles(rec)
	used, err := m.usedBy(ctx)
	if err != nil {
		return nil, wrap(err)
	}
	var evs []events.Event
	for _, in := range used[name] {
		evs = append(evs, events.NewLifecycle(events.InstanceUpdated, in, map[string]any{"profile": name}, &by))
	}
	if len(evs) > 0 {
		m.publish(ctx, evs)
	}
	return profileOf(rec, used[name]), nil
}

// RenameProfile renames a profile and every instance's reference to it.
// The default profile cannot be renamed (errdefs.ErrForbidden, as LXD).
func (m *Manager) RenameProfile(ctx context.Context, oldName, newName string) error {
	wrap := func(err error) error { return fmt.Errorf("renaming profile %q: %w", oldName, err) }
	if oldName == DefaultProfile {
		return wrap(fmt.Errorf("the %q profile cannot be renamed: %w", DefaultProfile, errdefs.ErrForbidden))
	}
	if err := ValidateProfileName(newName); err != nil {
		return wrap(err)
	}
	ps, err := m.profileStore(ctx)
	if err != nil {
		return wrap(err)
	}
	if err := m.load(ctx, false); err != nil {
		return wrap(err)
	}
	if err := ps.RenameProfile(ctx, oldName, newName); err != nil {
		return storeErr(err)
	}
	m.forgetProfile(oldName)
	// The store renamed the references in the rows; the cached records
	// follow, so the next write of an instance keeps the new name.
	m.mu.Lock()
	for _, e := range m.byName {
		if !slices.Contains(e.rec.Profiles, oldName) {
			continue
		}
		rec := cloneRec(e.rec)
		for i, p := range rec.Profiles {
			if p == oldName {
				rec.Profiles[i] = newName
			}
		}
		e.rec = rec
		e.changedLocked()
	}
	m.mu.Unlock()
	return nil
}

// DeleteProfile removes a profile. The default profile cannot be deleted
// (errdefs.ErrForbidden); a profile that instances use is
// errdefs.ErrConflict naming them.
func (m *Manager) DeleteProfile(ctx context.Context, name string) error {
	wrap := func(err error) error { return fmt.Errorf("deleting profile %q: %w", name, err) }
	if name == DefaultProfile {
		return wrap(fmt.Errorf("the %q profile cannot be deleted: %w", DefaultProfile, errdefs.ErrForbidden))
	}
	ps, err := m.profileStore(ctx)
	if err != nil {
		return wrap(err)
	}
	if _, err := ps.Profile(ctx, name); err != nil {
		return storeErr(err)
	}
	used, err := m.usedBy(ctx)
	if err != nil {
		return wrap(err)
	}
	if in := used[name]; len(in) > 0 {
		return wrap(fmt.Errorf("it is used by instances %s (assign them other profiles first): %w", strings.Join(in, ", "), errdefs.ErrConflict))
	}
	if err := ps.DeleteProfile(ctx, name); err != nil {
		return storeErr(err)
	}
	m.forgetProfile(name)
	return nil
}

// loadProfiles checks an instance's profile list (no name twice) and
// returns the profiles in order (errdefs.ErrNotFound naming a missing one).
func (m *Manager) loadProfiles(ctx context.Context, names []string) ([]*record.Profile, error) {
	if len(names) == 0 {
		return nil, nil
	}
	ps, err := m.profileStore(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*record.Profile, 0, len(names))
	for i, n := range names {
		if slices.Contains(names[:i], n) {
			return nil, fmt.Errorf("profile %q is named twice: %w", n, errdefs.ErrInvalid)
		}
		p, err := ps.Profile(ctx, n)
		if err != nil {
			return nil, storeErr(err)
		}
		out = append(out, p)
	}
	m.cacheProfiles(out...)
	return out, nil
}

// cacheProfiles remembers profiles as last read or written.
func (m *Manager) cacheProfiles(ps ...*record.Profile) {
	m.profMu.Lock()
	defer m.profMu.Unlock()
	if m.profCache == nil {
		m.profCache = map[string]*record.Profile{}
	}
	for _, p := range ps {
		m.profCache[p.Name] = p
	}
}

// forgetProfile drops a profile from the cache.
func (m *Manager) forgetProfile(name string) {
	m.profMu.Lock()
	delete(m.profCache, name)
	m.profMu.Unlock()
}

// cachedProfiles returns the profiles of names from the cache, reading
// those it lacks from the store.
func (m *Manager) cachedProfiles(ctx context.Context, names []string) ([]*record.Profile, error) {
	out := make([]*record.Profile, 0, len(names))
	m.profMu.Lock()
	for _, n := range names {
		p, ok := m.profCache[n]
		if !ok {
			out = nil
			break
		}
		out = append(out, p)
	}
	m.profMu.Unlock()
	if out != nil {
		return out, nil
	}
	return m.loadProfiles(ctx, names)
}

// expandForGuest makes inst's Config and Devices what its guest sees
// through devlxd, as LXD's expanded config and devices: its profiles
// (as this daemon last read them: at the instance's start, or when they
// were changed here) under its own keys, less what its backend was not
// given (forBackend). It leaves inst as it is when the profiles cannot
// be read (the guest then sees the instance's own keys).
func (m *Manager) expandForGuest(ctx context.Context, inst *Instance, rec *record.Instance) {
	if len(rec.Profiles) == 0 {
		return
	}
	profs, err := m.cachedProfiles(ctx, rec.Profiles)
	if err != nil {
		m.log.Warn("reading an instance's profiles for its guest", "instance", rec.Name, "err", err)
		return
	}
	_, info, err := m.backendInfo(ctx, rec.Backend)
	if err != nil {
		info = nil
	}
	inst.Config, inst.Devices = m.layer(rec, profs, info, false)
}

// AssignProfiles replaces the profiles of an instance (LXD's `lxc profile
// assign`): every one must exist. The change reaches the guest at its next
// start.
func (m *Manager) AssignProfiles(ctx context.Context, name string, profiles []string, by events.Requestor) (*Instance, error) {
	wrap := func(err error) error { return fmt.Errorf("assigning profiles to instance %q: %w", name, err) }
	if _, err := m.loadProfiles(ctx, profiles); err != nil {
		return nil, wrap(err)
	}
	e, err := m.lookup(ctx, name)
	if err != nil {
		return nil, wrap(err)
	}
	e.op.Lock()
	defer e.op.Unlock()
	rec, _, err := m.snapshot(e)
	if err != nil {
		return nil, wrap(err)
	}
	ps, err := m.profileStore(ctx)
	if err != nil {
		return nil, wrap(err)
	}
	if profiles == nil {
		profiles = []string{}
	}
	if err := ps.SetInstanceProfiles(ctx, rec.ID, profiles); err != nil {
		return nil, wrap(storeErr(err))
	}
	view, err := m.mutate(ctx, e, func(c *change) error {
		c.rec.Profiles = slices.Clone(profiles)
		c.emit(events.InstanceUpdated, nil, by)
		return nil
	})
	if err != nil {
		return nil, wrap(err)
	}
	return view, nil
}

// Expand layers config and devices as LXD does: the profiles in order,
// then the instance's own keys; later wins, and a device of the same name
// is replaced whole.
func Expand(profiles []*record.Profile, config map[string]string, devices map[string]map[string]string) (map[string]string, map[string]map[string]string) {
	cfg := map[string]string{}
	devs := map[string]map[string]string{}
	for _, p := range profiles {
		maps.Copy(cfg, p.Config)
		for n, d := range p.Devices {
			devs[n] = maps.Clone(d)
		}
	}
	maps.Copy(cfg, config)
	for n, d := range devices {
		devs[n] = maps.Clone(d)
	}
	return cfg, devs
}

// Expanded returns an instance's effective config and devices: its
// profiles, read from the store now, layered under its own keys.
func (m *Manager) Expanded(ctx context.Context, name string) (map[string]string, map[string]map[string]string, error) {
	e, err := m.lookup(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	rec, _, err := m.snapshot(e)
	if err != nil {
		return nil, nil, err
	}
	profs, err := m.loadProfiles(ctx, rec.Profiles)
	if err != nil {
		return nil, nil, fmt.Errorf("expanding instance %q: %w", name, err)
	}
	cfg, devs := Expand(profs, rec.Config, rec.Devices)
	return cfg, devs, nil
}

// forBackend layers the profiles under rec's config and devices for the
// backend described by info. What comes from a profile and the backend
// cannot take is left out for this backend, never a failed launch (a
// default profile must work on every backend): a user nic without
// contract.CapNICUser, a root disk without contract.CapDisk, a config key under a
// prefix the backend does not own. Each is logged once per start. The
// instance's own keys and devices are never left out (the backend refuses
// what it cannot do, as before).
func (m *Manager) forBackend(rec *record.Instance, profiles []*record.Profile, info *contract.Info) (map[string]string, map[string]map[string]string) {
	return m.layer(rec, profiles, info, true)
}

// layer is forBackend; logged says whether what is left out is logged.
func (m *Manager) layer(rec *record.Instance, profiles []*record.Profile, info *contract.Info, logged bool) (map[string]string, map[string]map[string]string) {
	logf := m.log.Info
	if !logged {
		logf = func(string, ...any) {}
	}
	pcfg, pdevs := Expand(profiles, nil, nil)
	cfg := map[string]string{}
	for k, v := range pcfg {
		if _, own := rec.Config[k]; own {
			continue
		}
		if info != nil && validateKey(k, v, false, backendKeys{rec.Backend, info}) != nil {
			logf("profile config key left out: the backend does not own it", "instance", rec.Name, "backend", rec.Backend, "key", k)
			continue
		}
		cfg[k] = v
	}
	maps.Copy(cfg, rec.Config)
	devs := map[string]map[string]string{}
	for n, d := range pdevs {
		if _, own := rec.Devices[n]; own {
			continue
		}
		if info != nil {
			if d["type"] == "nic" && d["nictype"] == "user" && !info.Has(contract.CapNICUser) {
				logf("profile device left out: the backend has no user-mode NICs", "instance", rec.Name, "backend", rec.Backend, "device", n, "capability", contract.CapNICUser)
				continue
			}
			if d["type"] == "disk" && d["path"] == "/" && d["source"] == "" && !info.Has(contract.CapDisk) {
				logf("profile device left out: the backend has no root disks", "instance", rec.Name, "backend", rec.Backend, "device", n, "capability", contract.CapDisk)
				continue
			}
		}
		devs[n] = d
	}
	for n, d := range rec.Devices {
		devs[n] = maps.Clone(d)
	}
	return cfg, devs
}

// dropEmpty returns cfg without its empty values (as LXD: an empty value
// is no value).
func dropEmpty(cfg map[string]string) map[string]string {
	out := make(map[string]string, len(cfg))
	for k, v := range cfg {
		if v != "" {
			out[k] = v
		}
	}
	return out
}
