package agentmon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/gorilla/websocket"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/errdefs"
)

// ExecLink reaches the exec routes of one connected agent (POST /1.0/exec,
// its operation and websockets) over the instance's link. Each call opens
// its own TLS connection, pinned to the agent's certificate.
type ExecLink struct {
	c *agentClient
}

// Exec returns the exec link of the instance's agent. It fails with an
// error wrapping errdefs.ErrConflict, without dialing, unless the agent is
// CONNECTED.
func (s *Service) Exec(uuid string) (*ExecLink, error) {
	m := s.monitor(uuid)
	if m == nil {
		return nil, fmt.Errorf("instance is not running, so it has no agent to exec through: %w", errdefs.ErrConflict)
	}
	if st := m.currentState(); st != instance.AgentConnected {
		return nil, fmt.Errorf("the agent of instance %q is not connected (agent state %s): %w", m.name, st, errdefs.ErrConflict)
	}
	return &ExecLink{c: m.client}, nil
}

// maxExecAnswer bounds an agent's answer to the exec routes.
const maxExecAnswer = 64 << 10

// call sends one request and decodes the operation of the answer.
func (l *ExecLink) call(ctx context.Context, method, path string, body []byte) (*api.Operation, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	name := l.c.certs.Name
	req, err := http.NewRequestWithContext(ctx, method, "https://agent"+path, r)
	if err != nil {
		return nil, fmt.Errorf("%s %s on agent of instance %q: %w", method, path, name, err)
	}
	req.Header.Set("Content-Type", "application/json")
	hc := l.c.httpClient()
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s on agent of instance %q: %w: %w", method, path, name, errdefs.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxExecAnswer))
	if err != nil {
		return nil, fmt.Errorf("reading answer of %s %s on agent of instance %q: %w", method, path, name, err)
	}
	var env api.Response[json.RawMessage]
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, fmt.Errorf("%s %s on agent of instance %q: %s: undecodable answer: %w", method, path, name, resp.Status, err)
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
		}
		return nil, fmt.Errorf("agent of instance %q: %s: %w", name, env.Error, kind)
	}
	var op api.Operation
	if err := json.Unmarshal(env.Metadata, &op); err != nil {
		return nil, fmt.Errorf("%s %s on agent of instance %q: decoding the operation: %w", method, path, name, err)
	}
	return &op, nil
}

// Start asks the agent to run req and returns its operation (with the
// agent's websocket secrets).
func (l *ExecLink) Start(ctx context.Context, req api.ExecPost) (*api.Operation, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encoding exec request: %w", err)
	}
	return l.call(ctx, http.MethodPost, "/1.0/exec", body)
}

// Wait waits until the agent's operation id has ended (or ctx is done) and
// returns it.
func (l *ExecLink) Wait(ctx context.Context, id string) (*api.Operation, error) {
	return l.call(ctx, http.MethodGet, "/1.0/operations/"+url.PathEscape(id)+"/wait", nil)
}

// Websocket connects to the websocket of the agent's operation id that
// secret opens.
func (l *ExecLink) Websocket(ctx context.Context, id, secret string) (*websocket.Conn, error) {
	hc := l.c.httpClient()
	tr, ok := hc.Transport.(*http.Transport)
	if !ok {
		return nil, fmt.Errorf("agent client of instance %q has no dialer", l.c.certs.Name)
	}
	d := websocket.Dialer{NetDialTLSContext: tr.DialTLSContext, HandshakeTimeout: 30 * time.Second,
		ReadBufferSize: 32 << 10, WriteBufferSize: 32 << 10}
	target := "wss://agent/1.0/operations/" + url.PathEscape(id) + "/websocket?secret=" + url.QueryEscape(secret)
	conn, resp, err := d.DialContext(ctx, target, nil)
	if err != nil {
		if resp != nil {
			resp.Body.Close()
			return nil, fmt.Errorf("websocket of exec %s on agent of instance %q: %s: %w", id, l.c.certs.Name, resp.Status, err)
		}
		return nil, fmt.Errorf("websocket of exec %s on agent of instance %q: %w", id, l.c.certs.Name, err)
	}
	return conn, nil
}
