package adminapi

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/contrib/websocket"
	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/internal/wskeepalive"
)

// maxOperations bounds the finished operations kept (the oldest go first).
const maxOperations = 1000

// operation is one admin API operation: an exec relayed to an agent. Its
// websockets (GET /1.0/operations/{id}/websocket?secret=S) are relayed to
// the agent operation's, fd by fd, as they connect.
type operation struct {
	owner   string            // ownerKey of the identity that started it
	secrets map[string]string // fd -> this operation's secret
	relay   relayTarget       // the agent side

	mu      sync.Mutex
	op      api.Operation
	claimed map[string]bool
	done    chan struct{}
}

// relayTarget connects an operation's fds to the agent.
type relayTarget interface {
	// dial connects fd to the agent operation's matching websocket.
	dial(fd string) (wsConn, error)
}

// operations keeps the admin API's operations by id.
type operations struct {
	mu    sync.Mutex
	byID  map[string]*operation
	order []string // finished operations, oldest first
}

// ownerKey names an identity for operation ownership: the same identity
// over another connection (another address) owns the same operations.
func ownerKey(r events.Requestor) string {
	return r.Protocol + "\x00" + r.Username + "\x00" + r.UID + "\x00" + r.Fingerprint
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func newUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// add registers a running operation of class with a fresh secret per fd.
func (o *operations) add(owner, class, description string, resources map[string][]string, fds []string, relay relayTarget) *operation {
	now := time.Now().UTC()
	op := &operation{owner: owner, secrets: map[string]string{}, relay: relay, claimed: map[string]bool{}, done: make(chan struct{})}
	for _, fd := range fds {
		op.secrets[fd] = randomHex(32)
	}
	op.op = api.Operation{
		ID: newUUID(), Class: class, Description: description, CreatedAt: now, UpdatedAt: now,
		Status: api.OperationRunning, StatusCode: api.OperationRunningCode, Resources: resources, Location: "none",
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.byID == nil {
		o.byID = map[string]*operation{}
	}
	o.byID[op.op.ID] = op
	return op
}

// get returns the operation id if owner started it.
func (o *operations) get(owner, id string) (*operation, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	op, ok := o.byID[id]
	if !ok || op.owner != owner {
		return nil, false
	}
	return op, true
}

// finish ends op with the command's exit code ret, or with err.
func (o *operations) finish(op *operation, ret int, err error) {
	op.mu.Lock()
	op.op.UpdatedAt = time.Now().UTC()
	if err != nil {
		op.op.Status, op.op.StatusCode, op.op.Err = api.OperationFailure, api.OperationFailureCode, err.Error()
	} else {
		op.op.Status, op.op.StatusCode = api.OperationSuccess, api.OperationSuccessCode
		op.op.Metadata.Return = &ret
	}
	op.mu.Unlock()
	close(op.done)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.order = append(o.order, op.op.ID)
	if len(o.order) > maxOperations {
		delete(o.byID, o.order[0])
		o.order = o.order[1:]
	}
}

// snapshot returns the operation object; the secrets are shown while it
// runs (to its owner only: get checks the owner).
func (op *operation) snapshot() api.Operation {
	op.mu.Lock()
	defer op.mu.Unlock()
	o := op.op
	if o.StatusCode == api.OperationRunningCode && len(op.secrets) > 0 {
		o.Metadata.FDs = op.secrets
	}
	return o
}

// claim finds the fd that secret opens and reserves it.
func (op *operation) claim(secret string) (string, error) {
	fd := ""
	for name, s := range op.secrets {
		if subtle.ConstantTimeCompare([]byte(s), []byte(secret)) == 1 {
			fd = name
		}
	}
	if fd == "" {
		return "", fiber.NewError(http.StatusForbidden, "wrong websocket secret")
	}
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.op.StatusCode != api.OperationRunningCode {
		return "", fiber.NewError(http.StatusConflict, fmt.Sprintf("operation %s has ended", op.op.ID))
	}
	if op.claimed[fd] {
		return "", fiber.NewError(http.StatusConflict, fmt.Sprintf("websocket %s of operation %s is already connected", fd, op.op.ID))
	}
	op.claimed[fd] = true
	return fd, nil
}

// isOperationStream reports whether a request waits on an operation or
// opens one of its websockets: long-lived, so not counted by the load
// limits (as the events stream and the instance wait).
func isOperationStream(c *fiber.Ctx) bool {
	p := c.Path()
	return c.Method() == fiber.MethodGet && strings.HasPrefix(p, "/1.0/operations/") &&
		(strings.HasSuffix(p, "/wait") || strings.HasSuffix(p, "/websocket"))
}

// registerOperations adds the /1.0/operations routes.
func (a *API) registerOperations(v1 fiber.Router) {
	v1.Get("/operations/:id", a.getOperation)
	v1.Get("/operations/:id/wait", a.waitOperation)
	v1.Get("/operations/:id/websocket", a.operationUpgrade, a.operationSocket())
}

// operation returns the request's operation, 404 unless its requestor
// started it.
func (a *API) operation(c *fiber.Ctx) (*operation, error) {
	op, ok := a.ops.get(ownerKey(requestor(c)), c.Params("id"))
	if !ok {
		return nil, fiber.NewError(http.StatusNotFound, fmt.Sprintf("operation %q not found", c.Params("id")))
	}
	return op, nil
}

// getOperation answers GET /1.0/operations/{id}.
func (a *API) getOperation(c *fiber.Ctx) error {
	op, err := a.operation(c)
	if err != nil {
		return err
	}
	return sync200(c, op.snapshot())
}

// waitOperation answers GET /1.0/operations/{id}/wait[?timeout=N]: the
// operation once it has ended, or after N seconds (-1 or absent: no limit).
func (a *API) waitOperation(c *fiber.Ctx) error {
	timeout := -1
	if t := c.Query("timeout"); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < -1 {
			return badRequest("invalid timeout %q: a number of seconds, or -1", t)
		}
		timeout = n
	}
	op, err := a.operation(c)
	if err != nil {
		return err
	}
	var expired <-chan time.Time
	if timeout >= 0 {
		t := time.NewTimer(time.Duration(timeout) * time.Second)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-op.done:
	case <-expired:
	case <-a.closing:
		return fiber.NewError(http.StatusServiceUnavailable, "the daemon is shutting down")
	case <-c.UserContext().Done():
		return c.UserContext().Err()
	}
	return sync200(c, op.snapshot())
}

// Locals key of a claimed operation websocket.
const opSocketKey = "guestlink.opsocket"

type claimedSocket struct {
	op *operation
	fd string
}

// operationUpgrade checks an operation websocket request before the
// upgrade: the owner, the secret, the fd not yet connected.
func (a *API) operationUpgrade(c *fiber.Ctx) error {
	op, err := a.operation(c)
	if err != nil {
		return err
	}
	if !websocket.IsWebSocketUpgrade(c) {
		return badRequest("GET %s is a websocket: send an upgrade request", c.Path())
	}
	if err := checkOrigin(c); err != nil {
		return err
	}
	fd, err := op.claim(c.Query("secret"))
	if err != nil {
		return err
	}
	c.Locals(opSocketKey, claimedSocket{op: op, fd: fd})
	return c.Next()
}

// operationSocket returns the websocket handler of an operation's fd: it
// dials the agent's and relays messages both ways until either side ends.
func (a *API) operationSocket() fiber.Handler {
	return websocket.New(func(conn *websocket.Conn) {
		cs, ok := conn.Locals(opSocketKey).(claimedSocket)
		if !ok {
			return
		}
		a.streams.Add(1)
		defer a.streams.Done()
		agent, err := cs.op.relay.dial(cs.fd)
		if err != nil {
			a.log.Warn("exec: connecting the agent's websocket", "operation", cs.op.op.ID, "fd", cs.fd, "err", err)
			closeWith(conn, websocket.CloseInternalServerErr, "the agent's websocket could not be reached")
			return
		}
		relay(conn, agent, a.closing)
	}, websocket.Config{HandshakeTimeout: 10 * time.Second, ReadBufferSize: 32 << 10, WriteBufferSize: 32 << 10})
}

// wsConn is the part of a websocket connection the relay uses (gorilla's
// and fasthttp's connections both have it).
type wsConn = wskeepalive.Conn

// relayKeepalive is the timing of the relay's pings (zero: the defaults;
// tests shorten it).
var relayKeepalive wskeepalive.Config

// relay copies messages (text and binary, as they come) between the
// client's websocket and the agent's until either ends or closing is
// closed; then both are closed, the other side told with a close frame.
// Both of the daemon's ends are pinged (internal/wskeepalive): an idle
// session stays open behind a proxy or a NAT, and a peer that stops
// answering pings is closed, which ends the relay like any other end.
func relay(clientConn, agentConn wsConn, closing <-chan struct{}) {
	client := wskeepalive.Keep(clientConn, relayKeepalive)
	agent := wskeepalive.Keep(agentConn, relayKeepalive)
	ended := make(chan struct{}, 2)
	running := 2
	pump := func(from, to *wskeepalive.Keeper) {
		defer func() { ended <- struct{}{} }()
		for {
			mt, data, err := from.ReadMessage()
			if err != nil {
				return
			}
			if err := to.WriteMessage(mt, data); err != nil {
				return
			}
		}
	}
	go pump(client, agent)
	go pump(agent, client)
	select {
	case <-ended:
		running--
	case <-closing:
	}
	bye := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
	deadline := time.Now().Add(time.Second)
	_ = client.WriteControl(websocket.CloseMessage, bye, deadline)
	_ = agent.WriteControl(websocket.CloseMessage, bye, deadline)
	_ = client.Close()
	_ = agent.Close()
	for ; running > 0; running-- {
		<-ended
	}
}
