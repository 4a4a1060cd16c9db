package adminapi

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/agentmon"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
)

// AccessRecorder records an exec or file operation in the instance's
// timeline and event log (core/instance.Manager); without it the daemon's
// log line is the only audit.
type AccessRecorder interface {
	RecordGuestAccess(ctx context.Context, name string, a instance.GuestAccess, by events.Requestor) error
}

var _ AccessRecorder = (*instance.Manager)(nil)

// accessTimeout bounds recording one access.
const accessTimeout = 30 * time.Second

// recordAccess records an exec or file operation through AccessRecorder,
// logging a failure: the operation happened whether or not it is recorded.
func (a *API) recordAccess(name string, access instance.GuestAccess, by events.Requestor) {
	rec, ok := a.cfg.Instances.(AccessRecorder)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), accessTimeout)
	defer cancel()
	if err := rec.RecordGuestAccess(ctx, name, access, by); err != nil {
		a.log.Error("recording a guest access in the timeline", "instance", name, "action", access.Action, "err", err)
	}
}

// Execer reaches the agents of running instances for exec
// (core/agentmon.Service). Exec fails with errdefs.ErrConflict, without
// dialing, unless the instance's agent is CONNECTED.
type Execer interface {
	Exec(uuid string) (*agentmon.ExecLink, error)
}

var _ Execer = (*agentmon.Service)(nil)

// execDialTimeout bounds connecting one websocket to the agent.
const execDialTimeout = 30 * time.Second

// execRelay is the agent side of an exec operation.
type execRelay struct {
	link    *agentmon.ExecLink
	id      string            // the agent's operation
	secrets map[string]string // the agent's secrets by fd
}

func (r *execRelay) dial(fd string) (wsConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), execDialTimeout)
	defer cancel()
	return r.link.Websocket(ctx, r.id, r.secrets[fd])
}

// registerExec adds POST /1.0/instances/{name}/exec and the operation routes.
func (a *API) registerExec(v1 fiber.Router) {
	v1.Post("/instances/:name/exec", a.execInstance)
	a.registerOperations(v1)
}

// execInstance answers POST /1.0/instances/{name}/exec as LXD: the command
// is started in the guest by its agent, and the answer is a 202 operation
// whose websockets (one secret per fd) relay the agent's.
func (a *API) execInstance(c *fiber.Ctx) error {
	if a.cfg.Exec == nil {
		return fiber.NewError(http.StatusNotImplemented, "exec is not available on this daemon")
	}
	var req api.ExecPost
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if err := req.Validate(); err != nil {
		return badRequest("invalid exec request: %v", err)
	}
	name := c.Params("name")
	ctx := c.UserContext()
	inst, err := a.cfg.Instances.Get(ctx, name)
	if err != nil {
		return err
	}
	link, err := a.cfg.Exec.Exec(inst.UUID)
	if err != nil {
		return fmt.Errorf("exec in instance %q: %w", name, err)
	}
	by := requestor(c)
	agentOp, err := link.Start(ctx, req)
	if err != nil {
		return fmt.Errorf("exec in instance %q: %w", name, err)
	}
	fds := make([]string, 0, len(agentOp.Metadata.FDs))
	for fd := range agentOp.Metadata.FDs {
		fds = append(fds, fd)
	}
	sort.Strings(fds)
	op := a.ops.add(ownerKey(by), agentOp.Class, "Executing command",
		map[string][]string{"instances": {"/1.0/instances/" + name}}, fds,
		&execRelay{link: link, id: agentOp.ID, secrets: agentOp.Metadata.FDs})
	id := op.snapshot().ID
	a.log.Info("exec started", "identity", by.Describe(), "instance", name, "command", req.Command,
		"interactive", req.Interactive, "user", req.User, "operation", id)
	go a.followExec(op, link, agentOp.ID, by, name, req.Command)
	url := "/1.0/operations/" + id
	c.Set(fiber.HeaderLocation, url)
	return c.Status(http.StatusAccepted).JSON(api.Async(url, op.snapshot()))
}

// followExec waits for the agent's operation to end, records its exit code
// in op and audits it (the log, the instance's timeline and an
// instance-exec event). It ends with the API (Shutdown).
func (a *API) followExec(op *operation, link *agentmon.ExecLink, agentID string, by events.Requestor, name string, command []string) {
	identity := by.Describe()
	ctx, cancel := a.untilClosing()
	defer cancel()
	res, err := link.Wait(ctx, agentID)
	switch {
	case err != nil:
		err = fmt.Errorf("waiting for the command in instance %q: %w", name, err)
	case res.StatusCode == api.OperationFailureCode:
		err = fmt.Errorf("exec in instance %q: %s", name, res.Err)
	case res.Metadata.Return == nil:
		err = fmt.Errorf("exec in instance %q: the agent gave no exit code", name)
	}
	ret := 0
	access := instance.GuestAccess{Action: events.InstanceExec, Command: command}
	if err == nil {
		ret = *res.Metadata.Return
		access.ExitCode = &ret
		a.log.Info("exec ended", "identity", identity, "instance", name, "command", command, "exit_code", ret, "operation", op.snapshot().ID)
	} else {
		access.Err = err.Error()
		a.log.Warn("exec failed", "identity", identity, "instance", name, "command", command, "operation", op.snapshot().ID, "err", err)
	}
	a.ops.finish(op, ret, err)
	a.recordAccess(name, access, by) // after: the client's wait does not include it
}
