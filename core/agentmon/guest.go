package agentmon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/link/devlxdapi"
)

// Guest state cache: what the agent reports of its guest (GET /1.0 for its
// features, GET /1.0/state for the guest's state) is kept per monitor. A
// list reads the cache only (CachedGuest, CachedIPv4) and never calls an
// agent: at 10,000 guests a list that refreshed stale reports kept agent
// calls running beside every list. Reports are refreshed on the agent's
// own signal, its connection (reports.go), at a bounded rate; a single
// instance's view fetches on demand (Guest, RefreshGuest).
const (
	// GuestStateTTL is how long a fetched guest state is served as is.
	GuestStateTTL = 5 * time.Second
	// GuestStateWait is how long GET /1.0/instances/{name}/state waits for
	// a fetch before it answers with what it has and says the agent is
	// slow.
	GuestStateWait = 2 * time.Second
	// maxGuestAnswer bounds an agent's answer to GET /1.0 or /1.0/state.
	maxGuestAnswer = 1 << 20
	// backgroundFetches is how many fetches single instances' views
	// (RefreshGuest) may run at once in the background.
	backgroundFetches = 8
)

// background holds a slot per running background fetch (RefreshGuest).
var background = make(chan struct{}, backgroundFetches)

// guestCache is one monitor's cache.
type guestCache struct {
	mu   sync.Mutex
	info api.GuestInfo
	ipv4 string // info.State.IPv4(), worked out once per fetch
	// listed is ipv4 for CachedIPv4, read without the lock (a list reads
	// it for every guest); nil before the first fetch.
	listed  atomic.Pointer[string]
	at      time.Time     // when info was fetched; zero: never
	running chan struct{} // closed when the running fetch ends; nil: none
	// retries counts the refreshes since the agent connected that found
	// no address; retry is the timer of the next one (reports.go).
	retries int
	retry   *time.Timer
	// wants counts the refreshes asked for (the agent's connection, a
	// retry); served is wants as it was when the last fetch to land
	// started: a refresh is due while wants > served (reportDue), and one
	// that a fetch served meanwhile costs nothing (reports.go).
	wants, served uint64
	// advReport: the advertisement's exchange fetched the report of an
	// agent not yet connected, so its coming CONNECTED wants none
	// (reports.go); cleared when the agent stops or is lost.
	advReport bool
	// advFetch: an advertisement under way will fetch the report on its
	// connection (reportWithAdvert); the refresher leaves it alone.
	advFetch bool
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
	done := m.fetchGuestLocked(nil)
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
// asking its agent, however old (nil when nothing was fetched or the agent
// is not connected; UpdatedAt says when the state was fetched). It starts
// nothing: a list of every guest reads it.
func (s *Service) CachedGuest(uuid string) *api.GuestInfo {
	m := s.connectedMonitor(uuid)
	if m == nil {
		return nil
	}
	c := &m.guest
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() {
		return nil
	}
	out := c.info
	return &out
}

// connectedMonitor returns the monitor of a running instance whose agent
// is connected, nil otherwise: only such an agent has a report to show.
func (s *Service) connectedMonitor(uuid string) *monitor {
	m := s.monitor(uuid)
	if m == nil || m.currentState() != instance.AgentConnected {
		return nil
	}
	return m
}

// CachedIPv4 returns the address of a running instance's guest as last
// fetched (GuestState.IPv4), "" when none is known or the agent is not
// connected. Like CachedGuest it starts nothing, and it copies nothing
// but the string: a list's ipv4 per row.
func (s *Service) CachedIPv4(uuid string) string {
	m := s.monitor(uuid)
	if m == nil || !m.connectedNow.Load() {
		return ""
	}
	if ip := m.guest.listed.Load(); ip != nil {
		return *ip
	}
	return ""
}

// CachedIPv4s is CachedIPv4 for many instances at once (a list's batch of
// rows): dst[i] gets uuids[i]'s address. It takes the service's lock once
// for the batch, not once per instance: a list of 10,000 running guests
// took it 10,000 times beside the heartbeats' and attaches' uses of it
// (about a fifth of the list's CPU, most of it waiting for the lock).
// The lock is held only for the map lookups; the addresses are read
// after, without it. dst must hold len(uuids).
func (s *Service) CachedIPv4s(uuids, dst []string) {
	const batch = 256 // held for 256 map lookups at most
	var ms [batch]*monitor
	for len(uuids) > 0 {
		n := min(len(uuids), batch)
		s.mu.Lock()
		for i, u := range uuids[:n] {
			ms[i] = s.monitors[u]
		}
		s.mu.Unlock()
		for i, m := range ms[:n] {
			dst[i] = ""
			if m == nil || !m.connectedNow.Load() {
				continue
			}
			if ip := m.guest.listed.Load(); ip != nil {
				dst[i] = *ip
			}
		}
		uuids, dst = uuids[n:], dst[n:]
	}
}

// RefreshGuest returns what CachedGuest returns and, when the report is
// missing or older than GuestStateTTL, starts a fetch in the background
// (at most backgroundFetches across the Service run at once): a single
// instance's view shows what is known and knows more the next time.
func (s *Service) RefreshGuest(uuid string) *api.GuestInfo {
	m := s.connectedMonitor(uuid)
	if m == nil {
		return nil
	}
	c := &m.guest
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || s.cfg.Now().Sub(c.at) >= GuestStateTTL {
		select {
		case background <- struct{}{}:
			m.fetchGuestLocked(func() { <-background })
		default:
		}
	}
	if c.at.IsZero() {
		return nil
	}
	out := c.info
	return &out
}

// fetchGuestLocked starts a fetch unless one runs, and returns the channel
// closed when the running fetch ends (nil when the monitor is halted).
// release, when not nil, is called once: when the fetch this call started
// ends, or at once when it started none. m.guest.mu is held.
func (m *monitor) fetchGuestLocked(release func()) chan struct{} {
	c := &m.guest
	if c.running != nil {
		if release != nil {
			release()
		}
		return c.running
	}
	m.bgMu.Lock()
	defer m.bgMu.Unlock()
	if m.stopped {
		if release != nil {
			release()
		}
		return nil
	}
	done := make(chan struct{})
	c.running = done
	wants := c.wants
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if release != nil {
			defer release()
		}
		ctx, cancel := context.WithTimeout(m.ctx, m.svc.cfg.RequestTimeout)
		defer cancel()
		// Both requests on one connection: one TLS handshake per report.
		hc := m.client.sessionClient()
		defer hc.CloseIdleConnections()
		info := m.fetchGuest(ctx, hc)
		c.mu.Lock()
		m.landLocked(info, wants)
		c.mu.Unlock()
		close(done)
	}()
	return done
}

// landLocked stores a fetched report in the cache (ended, the fetch that
// started when c.wants was wants) and schedules its retry. m.guest.mu is
// held; the caller closes the fetch's channel.
func (m *monitor) landLocked(info api.GuestInfo, wants uint64) {
	c := &m.guest
	if info.Error == "" || c.at.IsZero() {
		c.info, c.at = info, m.svc.cfg.Now()
		c.ipv4 = info.State.IPv4()
		ip := c.ipv4
		c.listed.Store(&ip)
	} else {
		// Keep the state fetched before, with why it is old.
		c.info.Error = info.Error
	}
	c.served = max(c.served, wants)
	c.running = nil
	m.afterFetchLocked(info)
	if c.wants > c.served {
		// Wanted while this fetch ran: its answer may predate the
		// want, so the want stays (the refresher drops duplicates).
		m.svc.reports.want(m)
	}
}

// fetchGuest asks the agent for its features and, when "state" is on, the
// guest's state, both through hc (one connection: sessionClient).
func (m *monitor) fetchGuest(ctx context.Context, hc *http.Client) api.GuestInfo {
	var info api.GuestInfo
	var ai devlxdapi.AgentInfo
	if err := m.client.getJSON(ctx, hc, "/1.0", &ai); err != nil {
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
	if err := m.client.getJSON(ctx, hc, "/1.0/state", &st); err != nil {
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

// getJSON GETs path on the agent through hc (sessionClient) and decodes
// the sync envelope's metadata into out. The answer is read to its end, so
// hc's connection serves the next call.
func (c *agentClient) getJSON(ctx context.Context, hc *http.Client, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://agent"+path, nil)
	if err != nil {
		return fmt.Errorf("GET %s on agent of instance %q: %w", path, c.certs.Name, err)
	}
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
