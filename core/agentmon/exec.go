package agentmon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/gorilla/websocket"

	"github.com/guestlink/guestlink/api"
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
	c, err := s.connected(uuid, "exec through")
	if err != nil {
		return nil, err
	}
	return &ExecLink{c: c}, nil
}

// call sends one request and decodes the operation of the answer.
func (l *ExecLink) call(ctx context.Context, method, path string, body []byte) (*api.Operation, error) {
	var op api.Operation
	if err := l.c.sync(ctx, method, path, body, &op); err != nil {
		return nil, err
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
