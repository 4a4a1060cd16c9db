package devlxd

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"github.com/gofiber/fiber/v2"
)

// maxOperations bounds the finished operations kept per server (the oldest
// go first).
const maxOperations = 1000

// Operation is a devlxd operation object, LXD's devlxd shape: the id, the
// status and its code, and the error of a failed one.
type Operation struct {
	ID         string `json:"id"`
	Status     string `json:"status"`
	StatusCode int    `json:"status_code"`
	Err        string `json:"err"`

	owner string // UUID of the instance whose guest started it
}

// operations keeps the operations the management routes returned. Every
// management action runs to its end before the answer (a dir pool's
// changes and a hot-plug are short), so each operation is finished when
// its id is handed out: wait answers at once, cancel is refused.
type operations struct {
	mu    sync.Mutex
	byID  map[string]*Operation
	order []string
}

func newOperations() *operations { return &operations{byID: map[string]*Operation{}} }

// finish records a finished operation of owner: Success, or Failure with
// err.
func (o *operations) finish(owner string, err error) *Operation {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	op := &Operation{ID: fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:]), Status: "Success", StatusCode: 200, owner: owner}
	if err != nil {
		op.Status, op.StatusCode, op.Err = "Failure", 400, err.Error()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.byID[op.ID] = op
	o.order = append(o.order, op.ID)
	if len(o.order) > maxOperations {
		delete(o.byID, o.order[0])
		o.order = o.order[1:]
	}
	return op
}

// get returns owner's operation id.
func (o *operations) get(owner, id string) (*Operation, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	op, ok := o.byID[id]
	if !ok || op.owner != owner {
		return nil, false
	}
	cp := *op
	return &cp, true
}

// waitOperation answers GET /1.0/operations/{id}/wait[?timeout=N].
func (s *Server) waitOperation(c *fiber.Ctx) error {
	if t := c.Query("timeout"); t != "" {
		if _, err := strconv.Atoi(t); err != nil {
			return sendError(c, http.StatusBadRequest, "Invalid timeout value")
		}
	}
	op, ok := s.ops.get(callerOf(c).UUID, c.Params("id"))
	if !ok {
		return sendError(c, http.StatusNotFound, "")
	}
	return sendSync(c, op)
}

// cancelOperation answers DELETE /1.0/operations/{id}: every operation is
// finished, so an existing one cannot be cancelled any more.
func (s *Server) cancelOperation(c *fiber.Ctx) error {
	if _, ok := s.ops.get(callerOf(c).UUID, c.Params("id")); !ok {
		return sendError(c, http.StatusNotFound, "")
	}
	return sendError(c, http.StatusForbidden, "Only running operations can be cancelled")
}
