package agentmon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/errdefs"
)

var _ instance.FSFreezer = (*Service)(nil)

// connected returns the client of the instance's agent, or an error
// wrapping errdefs.ErrConflict, without dialing, unless it is CONNECTED.
func (s *Service) connected(uuid, what string) (*agentClient, error) {
	m := s.monitor(uuid)
	if m == nil {
		return nil, fmt.Errorf("instance is not running, so it has no agent to %s: %w", what, errdefs.ErrConflict)
	}
	if st := m.currentState(); st != instance.AgentConnected {
		return nil, fmt.Errorf("the agent of instance %q is not connected (agent state %s): %w", m.name, st, errdefs.ErrConflict)
	}
	return m.client, nil
}

// FreezeFS asks the instance's agent to freeze the guest's filesystems
// (POST /1.0/freeze) for at most timeout, and returns the mount points
// frozen. The errors: errdefs.ErrConflict (no CONNECTED agent, or a freeze
// already held), errdefs.ErrForbidden (switched off in the guest),
// errdefs.ErrNotSupported (the agent cannot freeze).
func (s *Service) FreezeFS(ctx context.Context, uuid string, timeout time.Duration) ([]string, error) {
	c, err := s.connected(uuid, "freeze through")
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(api.FreezePost{Timeout: int(timeout / time.Second)})
	if err != nil {
		return nil, fmt.Errorf("encoding the freeze request: %w", err)
	}
	var st api.FreezeState
	if err := c.sync(ctx, http.MethodPost, "/1.0/freeze", body, &st); err != nil {
		return nil, fmt.Errorf("freezing the filesystems of instance %q: %w", c.certs.Name, err)
	}
	s.cfg.Logger.Info("guest filesystems frozen", "instance", c.certs.Name, "frozen", st.Frozen, "skipped", len(st.Skipped), "timeout", st.Timeout)
	return st.Frozen, nil
}

// ThawFS asks the instance's agent to thaw what its freeze holds (POST
// /1.0/thaw); expired reports that the agent had thawed by itself at the
// freeze's timeout before.
func (s *Service) ThawFS(ctx context.Context, uuid string) (bool, error) {
	m := s.monitor(uuid)
	if m == nil {
		return false, fmt.Errorf("thawing: instance is not running: %w", errdefs.ErrConflict)
	}
	c := m.client // whatever the agent's state now: a thaw is always worth trying
	var st api.FreezeState
	if err := c.sync(ctx, http.MethodPost, "/1.0/thaw", nil, &st); err != nil {
		return false, fmt.Errorf("thawing the filesystems of instance %q: %w", c.certs.Name, err)
	}
	s.cfg.Logger.Info("guest filesystems thawed", "instance", c.certs.Name, "thawed", st.Thawed, "expired", st.Expired)
	return st.Expired, nil
}

// maxSyncAnswer bounds an agent's answer to a sync request.
const maxSyncAnswer = 64 << 10

// sync sends one request to the agent and decodes the metadata of its
// sync answer into out. An error answer wraps the kind of its status:
// 400 errdefs.ErrInvalid, 403 ErrForbidden, 404 ErrNotFound, 409
// ErrConflict, 501 ErrNotSupported, others ErrUnavailable.
func (c *agentClient) sync(ctx context.Context, method, path string, body []byte, out any) error {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	name := c.certs.Name
	req, err := http.NewRequestWithContext(ctx, method, "https://agent"+path, r)
	if err != nil {
		return fmt.Errorf("%s %s on agent of instance %q: %w", method, path, name, err)
	}
	req.Header.Set("Content-Type", "application/json")
	hc := c.httpClient()
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s on agent of instance %q: %w: %w", method, path, name, errdefs.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxSyncAnswer))
	if err != nil {
		return fmt.Errorf("reading answer of %s %s on agent of instance %q: %w", method, path, name, err)
	}
	var env api.Response[json.RawMessage]
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("%s %s on agent of instance %q: %s: undecodable answer: %w", method, path, name, resp.Status, err)
	}
	if resp.StatusCode >= 300 {
		kind := errdefs.ErrUnavailable
		switch resp.StatusCode {
		case http.StatusBadRequest:
			kind = errdefs.ErrInvalid
		case http.StatusNotFound:
			kind = errdefs.ErrNotFound
		case http.StatusForbidden:
			kind = errdefs.ErrForbidden
		case http.StatusConflict:
			kind = errdefs.ErrConflict
		case http.StatusNotImplemented:
			kind = errdefs.ErrNotSupported
		}
		return fmt.Errorf("agent of instance %q: %s: %w", name, env.Error, kind)
	}
	if err := json.Unmarshal(env.Metadata, out); err != nil {
		return fmt.Errorf("%s %s on agent of instance %q: decoding the answer: %w", method, path, name, err)
	}
	return nil
}
