package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/guestlink/guestlink/agent/features"
	"github.com/guestlink/guestlink/agent/fsfreeze"
	"github.com/guestlink/guestlink/api"
)

// Freezer freezes and thaws the guest's filesystems (*fsfreeze.Freezer).
type Freezer interface {
	Freeze(ctx context.Context, timeout time.Duration) (*api.FreezeState, error)
	Thaw(ctx context.Context) (*api.FreezeState, error)
}

var _ Freezer = (*fsfreeze.Freezer)(nil)

// maxFreezeBody bounds a POST /1.0/freeze body.
const maxFreezeBody = 4 << 10

// serveFreeze answers POST /1.0/freeze ({"timeout": SECONDS}) and POST
// /1.0/thaw with the freeze's state: 403 naming the switch when the guest's
// admin switched "freeze" off, 501 when this agent cannot freeze (a
// simulated guest), 409 when a freeze is held already, 400 for a bad body.
func (h *Handler) serveFreeze(w http.ResponseWriter, r *http.Request, thaw bool) {
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "")
		return
	}
	if !h.feature(w, features.Freeze) {
		return
	}
	if h.Freeze == nil {
		writeError(w, http.StatusNotImplemented, "this agent cannot freeze filesystems")
		return
	}
	var (
		st  *api.FreezeState
		err error
	)
	if thaw {
		st, err = h.Freeze.Thaw(r.Context())
	} else {
		body, ok := readBody(w, r, maxFreezeBody)
		if !ok {
			return
		}
		var req api.FreezePost
		if len(bytes.TrimSpace(body)) > 0 {
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid request body: %v", err))
				return
			}
		}
		if req.Timeout < 0 || time.Duration(req.Timeout)*time.Second > fsfreeze.MaxTimeout {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("timeout %d: want 1 to %d seconds (0: %d)", req.Timeout,
				int(fsfreeze.MaxTimeout/time.Second), int(fsfreeze.DefaultTimeout/time.Second)))
			return
		}
		// The freeze outlives the request: its own timeout ends it.
		st, err = h.Freeze.Freeze(context.WithoutCancel(r.Context()), time.Duration(req.Timeout)*time.Second)
	}
	switch {
	case err == nil:
		writeSync(w, st)
	case errors.Is(err, fsfreeze.ErrUnsupported):
		writeError(w, http.StatusNotImplemented, err.Error())
	case errors.Is(err, fsfreeze.ErrFrozen):
		writeError(w, http.StatusConflict, err.Error())
	default:
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}
