package web

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/web/components"
)

// scopeKind is the kind of page a live stream serves: it decides which
// fragments an event becomes (rendered once per event and kind, shared by
// every stream of the kind) and whether counts are sent.
type scopeKind uint8

const (
	// scopeAll is a stream opened without view= (a page of an older
	// dashboard, or another client): every fragment of every event.
	scopeAll scopeKind = iota
	// scopeOverview (view=overview): an activity line per event, counts.
	scopeOverview
	// scopeInstances (view=instances): the rows the list page shows, rows
	// of created instances (appended, as the table always did) and the
	// removal of a shown row whose instance was deleted.
	scopeInstances
	// scopeInstance (view=instance&name=X): X's badges and timeline.
	scopeInstance
	// scopeNone (view=none): pages without live parts (images, launch,
	// delete): heartbeats only.
	scopeNone
	scopeKinds // how many kinds
)

// streamScope is what a live stream's page shows. The hub asks it about
// every live event, the stream about every replayed one; a list's rows
// change as created and deleted events add and remove them.
type streamScope struct {
	kind scopeKind
	name string // scopeInstance: the instance

	mu   sync.Mutex
	rows map[string]struct{} // scopeInstances: the names of the rows shown
	// changed is the id of the event that last added or removed a row,
	// by name: a replay runs beside the live events, and an older
	// creation or deletion it reads must not undo a newer one.
	changed map[string]int64
}

// lifecycleHead is the part of a lifecycle event's metadata a scope needs.
type lifecycleHead struct {
	Action string `json:"action"`
	Source string `json:"source"`
}

// eventHead returns the event's id, the instance a lifecycle event is
// about and its action.
func eventHead(ev events.Event) (id int64, name, action string) {
	var h lifecycleHead
	_ = json.Unmarshal(ev.Metadata, &h) // malformed: no action, the name from the event
	name = ev.Instance
	if name == "" {
		name = strings.TrimPrefix(h.Source, "/1.0/instances/")
	}
	return ev.ID, name, h.Action
}

// wants reports whether the page shows something of event id about
// instance name with action, and keeps a list's rows up to date: a created
// instance's row is appended to every list page (its later events are then
// wanted), a deleted one's row is removed.
func (s *streamScope) wants(id int64, name, action string) bool {
	switch s.kind {
	case scopeAll, scopeOverview:
		return true
	case scopeInstance:
		return name != "" && name == s.name
	case scopeInstances:
		s.mu.Lock()
		defer s.mu.Unlock()
		_, shown := s.rows[name]
		if action != events.InstanceCreated && action != events.InstanceDeleted {
			return shown
		}
		if s.changed == nil {
			s.changed = make(map[string]int64)
		}
		if id < s.changed[name] {
			return false // an older change, read by the replay
		}
		s.changed[name] = id
		if action == events.InstanceCreated {
			s.rows[name] = struct{}{}
			return true
		}
		delete(s.rows, name)
		return shown
	}
	return false
}

// counts reports whether the page shows the count tiles.
func (s *streamScope) counts() bool { return s.kind == scopeAll || s.kind == scopeOverview }

// maxPageScopes bounds the list pages' row sets kept for their streams
// (each at most a page of names: 100 by default).
const maxPageScopes = 1024

// pageScopes keeps the names each rendered list page shows, by a hash of
// them, so the page's stream (and its reconnects) carries exactly those
// rows: the names themselves would not fit a request line. Pages showing
// the same rows share an entry. An unknown key (the daemon restarted, or
// the entry was evicted) makes the stream list the page again from its
// filter.
type pageScopes struct {
	mu   sync.Mutex
	byID map[string][]string
	ids  []string // oldest first
}

// put records names and returns their key.
func (p *pageScopes) put(names []string) string {
	h := sha256.New()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0})
	}
	id := hex.EncodeToString(h.Sum(nil)[:8])
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byID == nil {
		p.byID = make(map[string][]string)
	}
	if _, ok := p.byID[id]; ok {
		return id
	}
	p.byID[id] = names
	p.ids = append(p.ids, id)
	if len(p.ids) > maxPageScopes {
		delete(p.byID, p.ids[0])
		p.ids = p.ids[1:]
	}
	return id
}

// get returns the names recorded under id.
func (p *pageScopes) get(id string) ([]string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	names, ok := p.byID[id]
	return names, ok
}

// listStream returns the stream parameters of a list page showing names
// with filter f: view=instances, the key of its rows and the filter.
func (d *Dashboard) listStream(f components.Filter, names []string) string {
	q := url.Values{}
	for _, kv := range components.FilterFields(f) {
		q.Set(kv[0], kv[1])
	}
	q.Set("view", "instances")
	q.Set("rows", d.scopes.put(names))
	return q.Encode()
}

// instanceStream returns the stream parameters of instance name's page.
func instanceStream(name string) string {
	return url.Values{"view": {"instance"}, "name": {name}}.Encode()
}

// pageRows returns the names of the rows the list page of filter f shows,
// as the page lists them.
func (d *Dashboard) pageRows(ctx context.Context, f components.Filter) ([]string, error) {
	rows, err := d.listRows(ctx, instance.ListFilter{Status: f.Status, Backend: f.Backend, Agent: f.Agent, Query: f.Query})
	if err != nil {
		return nil, err
	}
	sortRows(rows, f.Sort)
	size := d.cfg.PageSize
	pages := max(1, (len(rows)+size-1)/size)
	start := (min(f.Page, pages) - 1) * size
	end := min(start+size, len(rows))
	names := make([]string, 0, end-start)
	for _, r := range rows[start:end] {
		names = append(names, r.Name)
	}
	return names, nil
}

// parseScope reads a stream's view= parameters. A list page's rows come
// from its rows= key, or, when that is unknown, from listing the page
// again with its filter (status, agent, backend, q, sort, page).
func (d *Dashboard) parseScope(c *fiber.Ctx) (*streamScope, error) {
	switch view := c.Query("view"); view {
	case "":
		return &streamScope{kind: scopeAll}, nil
	case "overview":
		return &streamScope{kind: scopeOverview}, nil
	case "none":
		return &streamScope{kind: scopeNone}, nil
	case "instance":
		name := c.Query("name")
		if name == "" || len(name) > maxQuery {
			return nil, fmt.Errorf("live stream of an instance page: want name=<instance>: %w", errdefs.ErrInvalid)
		}
		return &streamScope{kind: scopeInstance, name: name}, nil
	case "instances":
		s := &streamScope{kind: scopeInstances, rows: make(map[string]struct{})}
		names, ok := d.scopes.get(c.Query("rows"))
		if !ok {
			f, err := parseFilter(func(k string) string { return c.Query(k) })
			if err != nil {
				return nil, fmt.Errorf("live stream of the instances page: %w", err)
			}
			ctx, cancel := context.WithTimeout(c.UserContext(), 5*time.Second)
			defer cancel()
			if names, err = d.pageRows(ctx, f); err != nil {
				return nil, fmt.Errorf("live stream of the instances page: listing its rows: %w", err)
			}
		}
		for _, n := range names {
			s.rows[n] = struct{}{}
		}
		return s, nil
	default:
		return nil, fmt.Errorf("unknown live stream view %q (overview, instances, instance, none): %w", view, errdefs.ErrInvalid)
	}
}
