package adminapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gorilla/websocket"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/cluster"
	"github.com/guestlink/guestlink/core/events"
)

// An exec on another member's instance (docs/cluster.md, "Exec and files
// across members"): the POST is forwarded to the owner like any request
// about its instances, and the owner's 202 operation is turned into one of
// this member's own, whose websockets are relayed to the owner's (over the
// cluster link, as the owner relays them to the agent) and which ends when
// the owner's does. The owner's secrets never leave the cluster link: the
// client gets this member's operation, with secrets of its own.

// memberExecWait is how long one wait on the owner's operation lasts
// before the next (?timeout=, seconds); a member that does not answer a
// wait within it plus the forward timeout has its operation failed.
const memberExecWait = 30

// isExecPost reports whether c is POST /1.0/instances/{name}/exec.
func isExecPost(c *fiber.Ctx) bool {
	if c.Method() != http.MethodPost {
		return false
	}
	rest, ok := strings.CutPrefix(c.Path(), "/1.0/instances/")
	name, tail, _ := strings.Cut(rest, "/")
	return ok && name != "" && tail == "exec"
}

// memberExec answers a forwarded exec whose owner answered body (a 202
// operation of the owner's): it registers this member's operation over the
// owner's and answers it instead.
func (a *API) memberExec(c *fiber.Ctx, member string, body []byte) error {
	var env api.Response[api.Operation]
	if err := json.Unmarshal(body, &env); err != nil || env.Metadata.ID == "" {
		return fiber.NewError(http.StatusBadGateway, fmt.Sprintf("member %s answered the exec with no operation", member))
	}
	remote := env.Metadata
	fds := make([]string, 0, len(remote.Metadata.FDs))
	for fd := range remote.Metadata.FDs {
		fds = append(fds, fd)
	}
	sort.Strings(fds)
	by := requestor(c)
	op := a.ops.add(ownerKey(by), remote.Class, remote.Description, remote.Resources, fds,
		&memberRelay{a: a, member: member, id: remote.ID, secrets: remote.Metadata.FDs, by: by})
	op.mu.Lock()
	op.op.Location = member
	op.mu.Unlock()
	id := op.snapshot().ID
	a.log.Info("exec forwarded", "identity", by.Describe(), "path", c.Path(), "member", member,
		"operation", id, "member_operation", remote.ID)
	go a.followMemberExec(op, member, remote.ID, by)
	u := "/1.0/operations/" + id
	c.Set(fiber.HeaderLocation, u)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(http.StatusAccepted).JSON(api.Async(u, op.snapshot()))
}

// setMemberHeaders marks req as forwarded by this member for by.
func (a *API) setMemberHeaders(h http.Header, by events.Requestor) {
	h.Set(headerRequestor, cluster.RequestorHeader(by))
	h.Set(headerForwardedBy, a.cfg.Cluster.Name())
}

// followMemberExec waits for the owner's operation id to end and ends op
// with its result: the exit code, or the owner's error, or the error of a
// member that stopped answering. The owner audits the command (its log,
// the instance's timeline and event); this member logs the forward. It
// ends with the API (Shutdown).
func (a *API) followMemberExec(op *operation, member, id string, by events.Requestor) {
	ctx, cancel := a.untilClosing()
	defer cancel()
	for {
		res, err := a.waitMemberOperation(ctx, member, id, by)
		if err != nil {
			a.log.Warn("exec forwarded: waiting for the member's operation", "member", member, "operation", op.snapshot().ID, "err", err)
			a.ops.finish(op, 0, err)
			return
		}
		if !res.Done() {
			continue
		}
		if res.StatusCode == api.OperationFailureCode || res.Metadata.Return == nil {
			msg := res.Err
			if msg == "" {
				msg = "the member gave no exit code"
			}
			a.ops.finish(op, 0, fmt.Errorf("member %s: %s", member, msg))
			return
		}
		a.ops.finish(op, *res.Metadata.Return, nil)
		return
	}
}

// waitMemberOperation waits up to memberExecWait seconds for the owner's
// operation id and returns it as the owner has it then.
func (a *API) waitMemberOperation(ctx context.Context, member, id string, by events.Requestor) (*api.Operation, error) {
	client, base, err := a.cfg.Cluster.Reach(ctx, member)
	if err != nil {
		return nil, errors.New(strings.TrimSuffix(err.Error(), ": "+cluster.ErrOffline.Error()))
	}
	budget := a.cfg.Cluster.ForwardTimeout() + memberExecWait*time.Second
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		fmt.Sprintf("%s/1.0/operations/%s/wait?timeout=%d", base, url.PathEscape(id), memberExecWait), nil)
	if err != nil {
		return nil, err
	}
	a.setMemberHeaders(req.Header, by)
	res, err := client.Do(req)
	if err != nil {
		return nil, errors.New(strings.TrimSuffix(cluster.NotAnswered(member, budget, err).Error(), ": "+cluster.ErrOffline.Error()))
	}
	defer res.Body.Close()
	var env api.Response[api.Operation]
	if err := json.NewDecoder(http.MaxBytesReader(nil, res.Body, 1<<20)).Decode(&env); err != nil {
		return nil, fmt.Errorf("member %s: reading operation %s: %w", member, id, err)
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("member %s: operation %s: %s", member, id, env.Error)
	}
	return &env.Metadata, nil
}

// memberRelay is the owner member's side of a forwarded exec operation.
type memberRelay struct {
	a       *API
	member  string
	id      string            // the owner's operation
	secrets map[string]string // the owner's secrets by fd
	by      events.Requestor
}

// dial connects fd to the owner operation's websocket over the cluster
// link, with the member certificate, for the original requestor.
func (r *memberRelay) dial(fd string) (wsConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), execDialTimeout)
	defer cancel()
	client, base, err := r.a.cfg.Cluster.Reach(ctx, r.member)
	if err != nil {
		return nil, err
	}
	tr, ok := client.Transport.(*http.Transport)
	if !ok {
		return nil, fmt.Errorf("member %s: no TLS transport to dial a websocket with", r.member)
	}
	d := websocket.Dialer{NetDialContext: tr.DialContext, TLSClientConfig: tr.TLSClientConfig.Clone(),
		HandshakeTimeout: cluster.ConnectTimeout, ReadBufferSize: 32 << 10, WriteBufferSize: 32 << 10}
	h := http.Header{}
	r.a.setMemberHeaders(h, r.by)
	target := "wss://" + strings.TrimPrefix(base, "https://") + "/1.0/operations/" + url.PathEscape(r.id) +
		"/websocket?secret=" + url.QueryEscape(r.secrets[fd])
	conn, resp, err := d.DialContext(ctx, target, h)
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("websocket %s of operation %s on member %s: %s: %w", fd, r.id, r.member, resp.Status, err)
		}
		return nil, fmt.Errorf("websocket %s of operation %s on member %s: %w", fd, r.id, r.member, err)
	}
	return conn, nil
}
