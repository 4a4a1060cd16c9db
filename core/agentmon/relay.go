package agentmon

import (
	"fmt"
	"net/http"
	"time"

	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/errdefs"
)

// relayHeaderTimeout bounds how long the agent may take to answer a relayed
// request once the request (its body included) is sent.
const relayHeaderTimeout = 30 * time.Second

// AgentDo sends req to the agent of the running instance with the given
// UUID over its link (TLS with the daemon's per-instance client
// certificate, the agent's pinned) and returns the agent's answer; the
// caller reads and closes its body. The request's body is streamed, and
// so is the answer's: nothing is buffered whole. req's URL names the path
// and query on the agent's link port; its host is ignored. It fails with
// errdefs.ErrConflict when the instance is not running or its agent is not
// connected.
func (s *Service) AgentDo(uuid string, req *http.Request) (*http.Response, error) {
	m := s.monitor(uuid)
	if m == nil {
		return nil, fmt.Errorf("the instance is not running: %w", errdefs.ErrConflict)
	}
	if st := m.currentState(); st != instance.AgentConnected {
		what := string(st)
		if what == "" {
			what = "not started"
		}
		return nil, fmt.Errorf("the agent of instance %q is not connected (%s): %w", m.name, what, errdefs.ErrConflict)
	}
	return m.client.stream(req)
}

// stream sends req on a fresh connection and returns the answer, whose body
// holds the connection until it is closed.
func (c *agentClient) stream(req *http.Request) (*http.Response, error) {
	u := *req.URL
	u.Scheme, u.Host = "https", "agent"
	req.URL, req.Host = &u, "agent"
	hc := c.httpClient()
	tr := hc.Transport.(*http.Transport)
	tr.ResponseHeaderTimeout = relayHeaderTimeout
	if req.Body != nil && req.Body != http.NoBody {
		// The agent refuses a push (bad path, feature off) before it
		// reads the body: with 100-continue that refusal is the answer,
		// not a broken pipe of a body sent to a closed connection.
		req.Header.Set("Expect", "100-continue")
		tr.ExpectContinueTimeout = relayHeaderTimeout
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s on agent of instance %q: %w: %w", req.Method, u.Path, c.certs.Name, err, errdefs.ErrUnavailable)
	}
	return resp, nil
}
