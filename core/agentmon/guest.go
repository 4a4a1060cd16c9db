package agentmon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/link/devlxdapi"
)

// Guest state cache: what the agent reports of its guest (GET /1.0 for its
// features, GET /1.0/state for the guest's state) is kept per monitor and
// fetched again when older than GuestStateTTL, one fetch at a time.
const (
	// GuestStateTTL is how long a fetched guest state is served as is.
	GuestStateTTL = 5 * time.Second
	// GuestStateWait is how long GET /1.0/instances/{name}/state waits for
	// a fetch before it answers with what it has and says the agent is
	// slow.
	GuestStateWait = 2 * time.Second
	// maxGuestAnswer bounds an agent's answer to GET /1.0 or /1.0/state.
	maxGuestAnswer = 1 << 20
	// backgroundFetches is how many fetches a list may start at once: a
	// list of 10,000 guests refreshes a few reports per call, not 10,000
	// connections at once; the others are refreshed by the next lists.
	backgroundFetches = 8
)

// background holds a slot per running background fetch (CachedGuest).
var background = make(chan struct{}, backgroundFetches)

// guestCache is one monitor's cache.
type guestCache struct {
	mu      sync.Mutex
	info    api.GuestInfo
	at      time.Time     // when info was fetched; zero: never
	running chan struct{} // closed when the running fetch ends; nil: none
}

// Guest returns what the agent of the running instance with the given UUID
// reports of its guest: the cached answer when fresher than GuestStateTTL,
// else a new one fetched now, waited for at most wait (then the answer is
// the cached one, saying the agent is slow, and the fetch goes on). ok is
// false when the instance is not running or its agent is not connected.
func (s *Service) Guest(ctx context.Context, uuid string, wait time.Duration) (info *api.GuestInfo, ok bool) {
	m := s.monitor(uuid)
	if m == nil || m.currentState() != instance.AgentConnected {
		return nil, false
	}
	c := &m.guest
	c.mu.Lock()
	if !c.at.IsZero() && s.cfg.Now().Sub(c.at) < GuestStateTTL {
		out := c.info
		c.mu.Unlock()
		return &out, true
	}
	done := m.fetchGuestLocked(false)
	c.mu.Unlock()
	if done != nil {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
		case <-ctx.Done():
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.info
	if c.running != nil && (c.at.IsZero() || s.cfg.Now().Sub(c.at) >= GuestStateTTL) {
		out.Error = fmt.Sprintf("the agent did not answer within %s; showing the state fetched before, if any", wait)
	}
	return &out, true
}

// CachedGuest returns the cached guest info of a running instance without
// asking its agent (nil when nothing was fetched), and starts a fetch in
// the background when it is missing or old: a list shows what is known
// and knows more the next time, with no agent round trip per row.
func (s *Service) CachedGuest(uuid string) *api.GuestInfo {
	m := s.monitor(uuid)
	if m == nil || m.currentState() != instance.AgentConnected {
		return nil
	}
	c := &m.guest
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || s.cfg.Now().Sub(c.at) >= GuestStateTTL {
		m.fetchGuestLocked(true)
	}
	if c.at.IsZero() {
		return nil
	}
	out := c.info
	return &out
}

// fetchGuestLocked starts a fetch unless one runs, and returns the channel
// closed when the running fetch ends (nil when the monitor is halted, or a
// background fetch finds no free slot). m.guest.mu is held.
func (m *monitor) fetchGuestLocked(inBackground bool) chan struct{} {
	c := &m.guest
	if c.running != nil {
		return c.running
	}
	m.bgMu.Lock()
	defer m.bgMu.Unlock()
	if m.stopped {
		return nil
	}
	release := func() {}
	if inBackground {
		select {
		case background <- struct{}{}:
			release = func() { <-background }
		default:
			return nil
		}
	}
	done := make(chan struct{})
	c.running = done
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer release()
		ctx, cancel := context.WithTimeout(context.Background(), m.svc.cfg.RequestTimeout)
		defer cancel()
		go func() {
			select {
			case <-m.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		info := m.fetchGuest(ctx)
		c.mu.Lock()
		if info.Error == "" || c.at.IsZero() {
			c.info, c.at = info, m.svc.cfg.Now()
		} else {
			// Keep the state fetched before, with why it is old.
			c.info.Error = info.Error
		}
		c.running = nil
		c.mu.Unlock()
		close(done)
	}()
	return done
}

// fetchGuest asks the agent for its features and, when "state" is on, the
// guest's state.
func (m *monitor) fetchGuest(ctx context.Context) api.GuestInfo {
	var info api.GuestInfo
	var ai devlxdapi.AgentInfo
	if err := m.client.getJSON(ctx, "/1.0", &ai); err != nil {
		info.Error = err.Error()
		return info
	}
	info.Features = ai.Features
	if info.Features == nil {
		info.Features = []string{}
	}
	if !slices.Contains(ai.Features, "state") {
		return info
	}
	var st api.GuestState
	if err := m.client.getJSON(ctx, "/1.0/state", &st); err != nil {
		info.Error = err.Error()
		return info
	}
	now := m.svc.cfg.Now()
	info.State, info.UpdatedAt = &st, &now
	if r, ok := m.svc.cfg.Instances.(OOMReporter); ok && st.OOMKills > 0 {
		if err := r.ReportOOMCounter(ctx, m.uuid, st.OOMKills); err != nil {
			m.svc.cfg.Logger.Warn("agentmon: reporting the guest's OOM kills", "instance", m.name, "err", err)
		}
	}
	return info
}

// getJSON GETs path on the agent and decodes the sync envelope's metadata
// into out.
func (c *agentClient) getJSON(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://agent"+path, nil)
	if err != nil {
		return fmt.Errorf("GET %s on agent of instance %q: %w", path, c.certs.Name, err)
	}
	hc := c.httpClient()
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s on agent of instance %q: %w", path, c.certs.Name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxGuestAnswer))
	if err != nil {
		return fmt.Errorf("GET %s on agent of instance %q: %w", path, c.certs.Name, err)
	}
	var env struct {
		Metadata json.RawMessage `json:"metadata"`
		Error    string          `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("GET %s on agent of instance %q: %s: decoding: %w", path, c.certs.Name, resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s on agent of instance %q: %s: %s", path, c.certs.Name, resp.Status, env.Error)
	}
	if err := json.Unmarshal(env.Metadata, out); err != nil {
		return fmt.Errorf("GET %s on agent of instance %q: decoding: %w", path, c.certs.Name, err)
	}
	return nil
}
