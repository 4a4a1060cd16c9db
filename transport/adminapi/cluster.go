package adminapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/cluster"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/transport/httpwrap"
)

// ClusterService is this daemon's cluster membership (core/cluster).
type ClusterService interface {
	Name() string
	Members(ctx context.Context) ([]cluster.Member, error)
	AddMember(ctx context.Context, name, by string) (string, time.Time, error)
	RemoveMember(ctx context.Context, name string, force bool) ([]string, error)
	Locate(ctx context.Context, instance string) (string, error)
	Reach(ctx context.Context, member string) (*http.Client, string, error)
	PeerOf(ctx context.Context, cs *tls.ConnectionState) (string, bool)
	HandleJoin(ctx context.Context, body []byte) ([]byte, error)
	Place(ctx context.Context, backend string) (string, error)
	ForwardTimeout() time.Duration
	Fenced() string
}

var _ ClusterService = (*cluster.Cluster)(nil)

// Headers between members (core/cluster).
const (
	headerForwardedBy = cluster.HeaderForwardedBy
	headerRequestor   = cluster.HeaderRequestor
)

// ProtocolCluster is the requestor protocol of a cluster member calling
// for itself (not forwarding someone's request).
const ProtocolCluster = "cluster"

// registerCluster adds the cluster routes: /1.0/cluster/members and, on
// the cluster listener, the join route and the members-only internal
// routes. The join and internal routes answer without the wrapper: they
// speak the members' own protocol (core/cluster), not the LXD envelopes.
func (a *API) registerCluster(r fiber.Router, v1 fiber.Router) {
	withCluster := func(h func(*request, ClusterService) (any, error)) handler {
		return httpwrap.With(a.clusterService, h)
	}
	v1.Get("/cluster/members", a.ok(withCluster(a.listMembers)))
	v1.Post("/cluster/members", a.created(withCluster(withBody(a.addMember))))
	v1.Get("/cluster/members/:name", a.ok(withCluster(a.getMember), memberParam))
	v1.Delete("/cluster/members/:name", a.ok(withCluster(a.removeMember), memberParam))
	r.Post(cluster.JoinPath, a.join)
	in := r.Group("/internal/cluster", a.envelopeErrors, a.peerOnly)
	in.Get("/instances", a.internalInstances)
	in.Get("/instances/:name", a.internalInstance)
}

// clusterService returns the cluster membership, or a 404 error outside a
// cluster.
func (a *API) clusterService() (ClusterService, error) {
	if a.cfg.Cluster == nil {
		return nil, fiber.NewError(http.StatusNotFound, "this daemon is not in a cluster: clusters need a PostgreSQL database (guestlinkd --database postgres://... --cluster-address HOST:PORT, see docs/cluster.md)")
	}
	return a.cfg.Cluster, nil
}

// listMembers answers GET /1.0/cluster/members.
func (a *API) listMembers(r *request, cl ClusterService) (any, error) {
	return cl.Members(r.UserContext())
}

// getMember answers GET /1.0/cluster/members/{name}.
func (a *API) getMember(r *request, cl ClusterService) (any, error) {
	ms, err := cl.Members(r.UserContext())
	if err != nil {
		return nil, err
	}
	name := r.Param("name")
	for _, m := range ms {
		if m.Name == name {
			return m, nil
		}
	}
	return nil, fmt.Errorf("cluster member %q: %w", name, errdefs.ErrNotFound)
}

// addMember answers POST /1.0/cluster/members with 201 and the join token.
func (a *API) addMember(r *request, cl ClusterService, req *api.ClusterMembersPost) (any, error) {
	tok, exp, err := cl.AddMember(r.UserContext(), req.Name, requestor(r.Ctx).Describe())
	if err != nil {
		return nil, err
	}
	return api.ClusterJoinToken{Name: req.Name, Token: tok, ExpiresAt: exp}, nil
}

// removeMember answers DELETE /1.0/cluster/members/{name}[?force=true].
func (a *API) removeMember(r *request, cl ClusterService) (any, error) {
	name := r.Param("name")
	force := r.Query("force") == "1" || r.Query("force") == "true"
	left, err := cl.RemoveMember(r.UserContext(), name, force)
	if err != nil {
		return nil, err
	}
	if left == nil {
		left = []string{}
	}
	return api.ClusterMemberRemoved{Name: name, InstancesLeft: left}, nil
}

// join answers a joining daemon (no member certificate yet: the token's
// secret is its credential).
func (a *API) join(c *fiber.Ctx) error {
	if a.cfg.Cluster == nil {
		return c.Status(http.StatusNotFound).Send(cluster.JoinError(errors.New("this daemon is not in a cluster")))
	}
	out, err := a.cfg.Cluster.HandleJoin(c.UserContext(), c.Body())
	if err != nil {
		a.log.Warn("a join was refused", "from", c.Context().RemoteAddr().String(), "err", err)
		return c.Status(errdefs.HTTPStatus(err)).Send(cluster.JoinError(err))
	}
	c.Response().Header.SetContentType(fiber.MIMEApplicationJSON)
	return c.Send(out)
}

// peerOnly lets only cluster members (verified member certificates) in.
func (a *API) peerOnly(c *fiber.Ctx) error {
	if a.cfg.Cluster == nil {
		return fiber.NewError(http.StatusNotFound, "this daemon is not in a cluster")
	}
	if _, ok := a.cfg.Cluster.PeerOf(c.UserContext(), c.Context().TLSConnectionState()); !ok {
		return fiber.NewError(http.StatusForbidden, "cluster members only: present a member certificate")
	}
	return c.Next()
}

func (a *API) internalInstances(c *fiber.Ctx) error {
	f := instance.ListFilter{Status: c.Query("status"), Backend: c.Query("backend"), Agent: c.Query("agent"), Query: c.Query("q")}
	list, err := a.cfg.Instances.List(cluster.WithLocalOnly(c.UserContext()), f)
	if err != nil {
		return err
	}
	return c.JSON(cluster.MemberInstances(list, a.cachedIPv4))
}

func (a *API) internalInstance(c *fiber.Ctx) error {
	inst, err := a.cfg.Instances.Get(cluster.WithLocalOnly(c.UserContext()), c.Params("name"))
	if err != nil {
		return err
	}
	return c.JSON(cluster.MemberInstance(inst, a.cachedIPv4))
}

// clusterPeer returns the member a request comes from (a verified member
// certificate on the cluster listener).
func (a *API) clusterPeer(c *fiber.Ctx) (string, bool) {
	if a.cfg.Cluster == nil {
		return "", false
	}
	return a.cfg.Cluster.PeerOf(c.UserContext(), c.Context().TLSConnectionState())
}

// peerRequestor is the requestor of a request from a member: the original
// requestor when it forwards one, else the member itself.
func peerRequestor(c *fiber.Ctx, member string) events.Requestor {
	if h := c.Get(headerRequestor); h != "" {
		if by, ok := cluster.ParseRequestorHeader(h); ok {
			return by
		}
	}
	return events.Requestor{Username: "cluster/" + member, Protocol: ProtocolCluster}
}

// forward sends a request about another member's instance to that member
// and answers with its answer; requests about this member's instances (and
// everything else) go on. A create names its member with ?target= (or is
// placed on the member with the fewest instances that has its backend).
func (a *API) forward(c *fiber.Ctx) error {
	if a.cfg.Cluster == nil {
		return c.Next()
	}
	if reason := a.cfg.Cluster.Fenced(); reason != "" && c.Method() != http.MethodGet && strings.HasPrefix(c.Path(), "/1.0/instances") {
		// This member's lease is gone: it changes no instance, its own
		// (now another daemon's, or nobody's) or another member's.
		return fiber.NewError(http.StatusServiceUnavailable, reason)
	}
	if c.Get(headerForwardedBy) != "" {
		if _, ok := a.clusterPeer(c); ok {
			return a.ownerDeadline(c) // forwarded to this member: it is the owner
		}
		// Not known as a member's this time (the member check reads the
		// store, which can fail or lag, e.g. just after this daemon was
		// frozen): the request goes on as any client's, but a deadline it
		// carries still holds. Its caller may have been answered 503
		// already; carrying it out late would make that answer a lie, and
		// dropping a late request is safe whoever sent it.
		if err := a.lateForward(c); err != nil {
			return err
		}
	}
	rest, ok := strings.CutPrefix(c.Path(), "/1.0/instances")
	if !ok || (rest != "" && rest[0] != '/') {
		return c.Next()
	}
	ctx := c.UserContext()
	self := a.cfg.Cluster.Name()
	var target string
	if rest == "" || rest == "/" {
		if c.Method() != http.MethodPost {
			return c.Next() // the list merges every member's part
		}
		target = c.Query("target")
		if target == "" {
			var req struct {
				Backend string `json:"backend"`
			}
			_ = json.Unmarshal(c.Body(), &req)
			backend := req.Backend
			if backend == "" {
				backend = a.cfg.DefaultBackend
			}
			if backend == "" {
				return c.Next()
			}
			placed, err := a.cfg.Cluster.Place(ctx, backend)
			if err != nil {
				return err
			}
			target = placed
		}
	} else {
		name, _, _ := strings.Cut(rest[1:], "/")
		if n, err := url.PathUnescape(name); err == nil {
			name = n
		}
		loc, err := a.cfg.Cluster.Locate(ctx, name)
		if err != nil {
			if errors.Is(err, errdefs.ErrNotFound) {
				return c.Next() // the route answers 404 as usual
			}
			return err
		}
		target = loc
	}
	if target == "" || target == self {
		return c.Next()
	}
	if strings.HasSuffix(rest, "/files") {
		// The owner trusts the forwarding member's authentication: the
		// files routes' admin check is made here (a viewer's pull too).
		if err := refuseViewer(c); err != nil {
			return err
		}
	}
	if c.Method() == http.MethodGet && !strings.Contains(strings.TrimPrefix(rest, "/"), "/") {
		// Reading an instance: its member answers; when that member is
		// offline the instance is shown as stored, status Unknown.
		if _, _, err := a.cfg.Cluster.Reach(ctx, target); errors.Is(err, cluster.ErrOffline) {
			return c.Next()
		}
	}
	return a.proxy(c, target)
}

// forwardBudget returns how long a forwarded request may take: the
// cluster's forward timeout plus the request's own timeout (a wait's
// ?timeout, a state action's "timeout") or, for the requests that copy
// disks, cluster.LongAllowance; stream reports a request whose
// answer has no end (a followed console), bounded only until its headers.
func forwardBudget(c *fiber.Ctx, base time.Duration) (budget time.Duration, stream bool) {
	path := c.Path()
	switch {
	case c.Method() == http.MethodGet && strings.HasSuffix(path, "/console"):
		follow, _ := boolQuery(c, "follow")
		return base, follow
	case strings.HasSuffix(path, "/files") && (c.Method() == http.MethodGet || isFilePush(c)):
		// A pull's body, or a push's, lasts as long as its bytes flow
		// (a push: proxy's timer restarts at each read of the body).
		return base, true
	case c.Method() == http.MethodGet && strings.HasSuffix(path, "/wait"):
		d := DefaultWaitTimeout
		if v, err := time.ParseDuration(c.Query("timeout")); err == nil && v > 0 && v <= MaxWaitTimeout {
			d = v
		}
		return base + d, false
	case c.Method() == http.MethodPut && strings.HasSuffix(path, "/state"):
		var req struct {
			Timeout int `json:"timeout"`
		}
		_ = json.Unmarshal(c.Body(), &req)
		if req.Timeout > 0 && req.Timeout <= maxStopTimeout {
			return base + time.Duration(req.Timeout)*time.Second, false
		}
		return base + cluster.StateAllowance, false
	case c.Method() == http.MethodPost && strings.TrimSuffix(path, "/") == "/1.0/instances",
		c.Method() != http.MethodGet && strings.Contains(path, "/snapshots"),
		c.Method() == http.MethodPut && strings.Count(strings.TrimPrefix(path, "/1.0/instances/"), "/") == 0:
		// A create (its image, its first start), a snapshot or a restore.
		return base + cluster.LongAllowance, false
	}
	return base, false
}

// proxy relays the request to member and streams its answer back. The
// request carries its deadline (cluster.SetDeadline); a member that does
// not answer within it (or, for a stream, does not send its headers
// within the forward timeout) gets 503 "member b did not answer in N s".
func (a *API) proxy(c *fiber.Ctx, member string) error {
	client, base, err := a.cfg.Cluster.Reach(c.UserContext(), member)
	if errors.Is(err, cluster.ErrOffline) {
		return fiber.NewError(http.StatusServiceUnavailable, strings.TrimSuffix(err.Error(), ": "+cluster.ErrOffline.Error()))
	}
	if err != nil {
		return err
	}
	budget, stream := forwardBudget(c, a.cfg.Cluster.ForwardTimeout())
	var (
		ctx     context.Context
		cancel  context.CancelFunc
		headers *time.Timer
	)
	if stream {
		// The answer has no end: only its headers are bounded.
		ctx, cancel = context.WithCancel(c.UserContext())
		headers = time.AfterFunc(budget, cancel)
		defer headers.Stop()
	} else {
		ctx, cancel = context.WithTimeout(c.UserContext(), budget)
	}
	body := requestBody(c)
	var pushed *bodyGuard
	if headers != nil && isFilePush(c) && c.Request().IsBodyStream() {
		// A push streams its body to the owner: the owner must answer
		// within the budget of the last byte read, and the body is
		// never read after this handler returns (bodyGuard, files.go).
		var r io.Reader = body
		if cl := int64(c.Request().Header.ContentLength()); cl >= 0 {
			r = io.LimitReader(r, cl)
		}
		pushed = &bodyGuard{r: &progressReader{r: r, progress: func() { headers.Reset(budget) }}}
		defer pushed.release()
		body = pushed
	}
	req, err := http.NewRequestWithContext(ctx, c.Method(), base+c.OriginalURL(), body)
	if err != nil {
		cancel()
		return fmt.Errorf("forwarding to member %s: %w", member, err)
	}
	if cl := int64(c.Request().Header.ContentLength()); pushed != nil && cl >= 0 {
		req.ContentLength = cl
		if cl == 0 {
			req.Body = http.NoBody
		}
	}
	c.Request().Header.VisitAll(func(k, v []byte) {
		switch strings.ToLower(string(k)) {
		case "authorization", "cookie", "host", "connection", "content-length", "transfer-encoding",
			strings.ToLower(headerForwardedBy), strings.ToLower(headerRequestor),
			strings.ToLower(cluster.HeaderTimeout), strings.ToLower(cluster.HeaderDeadline):
			return
		}
		req.Header.Add(string(k), string(v))
	})
	req.Header.Set(headerRequestor, cluster.RequestorHeader(requestor(c)))
	req.Header.Set(headerForwardedBy, a.cfg.Cluster.Name())
	if dl, ok := ctx.Deadline(); ok && !stream {
		cluster.SetDeadline(req.Header, dl)
	}
	res, err := client.Do(req)
	if err != nil {
		cancel()
		nerr := cluster.NotAnswered(member, budget, err)
		a.log.Warn("a forwarded request failed", "member", member, "method", c.Method(), "path", c.Path(), "err", err)
		return fiber.NewError(http.StatusServiceUnavailable, strings.TrimSuffix(nerr.Error(), ": "+cluster.ErrOffline.Error()))
	}
	c.Status(res.StatusCode)
	for k, vs := range res.Header {
		switch strings.ToLower(k) {
		case "content-length", "transfer-encoding", "connection", "date", "server":
			continue
		}
		for _, v := range vs {
			c.Response().Header.Add(k, v)
		}
	}
	c.Response().Header.Set("X-Guestlink-Location", member)
	if !stream {
		// Read the whole answer within the budget, then release it.
		body, err := io.ReadAll(io.LimitReader(res.Body, maxForwardedAnswer))
		res.Body.Close()
		cancel()
		if err != nil {
			nerr := cluster.NotAnswered(member, budget, err)
			return fiber.NewError(http.StatusServiceUnavailable, strings.TrimSuffix(nerr.Error(), ": "+cluster.ErrOffline.Error()))
		}
		if res.StatusCode == http.StatusAccepted && isExecPost(c) {
			return a.memberExec(c, member, body) // clusterexec.go
		}
		return c.Send(body)
	}
	c.Context().SetBodyStream(&cancelOnClose{ReadCloser: res.Body, cancel: cancel}, -1)
	return nil
}

// progressReader calls progress after each read that returned bytes.
type progressReader struct {
	r        io.Reader
	progress func()
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.progress()
	}
	return n, err
}

// maxForwardedAnswer bounds a forwarded answer that is not a stream.
const maxForwardedAnswer = 256 << 20

// cancelOnClose releases a stream's context when fasthttp closes its body.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (r *cancelOnClose) Close() error {
	err := r.ReadCloser.Close()
	r.cancel()
	return err
}

// ownerDeadline makes a request forwarded to this member honour the
// deadline its forwarding member gave it: past it the request is dropped
// (its caller was answered 503 already), else its context ends then.
func (a *API) ownerDeadline(c *fiber.Ctx) error {
	dl, ok, err := a.forwardedDeadline(c)
	if err != nil {
		return err
	}
	if !ok {
		return c.Next()
	}
	ctx, cancel := context.WithDeadline(c.UserContext(), dl)
	defer cancel()
	c.SetUserContext(ctx)
	return c.Next()
}

// forwardedDeadline returns the deadline a forwarded request carries (ok
// false: none), or the 503 that drops it when the deadline has passed (its
// caller was answered 503 already), or a 400 for malformed headers.
func (a *API) forwardedDeadline(c *fiber.Ctx) (deadline time.Time, ok bool, err error) {
	dl, ok, err := cluster.ForwardedDeadline(func(k string) string { return c.Get(k) }, time.Now())
	if err != nil {
		return time.Time{}, false, badRequest("%v", err)
	}
	if !ok {
		return time.Time{}, false, nil
	}
	if late := time.Since(dl); late >= 0 {
		a.log.Warn("dropped a forwarded request: it arrived after its deadline", "from", c.Get(headerForwardedBy),
			"method", c.Method(), "path", c.Path(), "late", late.Round(time.Millisecond))
		return time.Time{}, false, fiber.NewError(http.StatusServiceUnavailable, fmt.Sprintf("%v (%s ago): it was not carried out", cluster.ErrDeadlinePassed, late.Round(time.Millisecond)))
	}
	return dl, true, nil
}

// lateForward answers the error that drops a request whose forwarded
// deadline has passed, else nil.
func (a *API) lateForward(c *fiber.Ctx) error {
	_, _, err := a.forwardedDeadline(c)
	return err
}
