package control

import (
	"net/http"

	"github.com/guestlink/guestlink/agent/features"
	"github.com/guestlink/guestlink/api"
)

// StateCollector reads the guest's state (*gueststate.Collector).
type StateCollector interface {
	Collect() (*api.GuestState, error)
}

// serveState answers GET /1.0/state: the guest's state, read now (403 when
// the guest's admin switched "state" off).
func (h *Handler) serveState(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeError(w, http.StatusMethodNotAllowed, "")
		return
	}
	if !h.feature(w, features.State) {
		return
	}
	if h.State == nil {
		writeError(w, http.StatusNotImplemented, "this agent reports no guest state")
		return
	}
	st, err := h.State.Collect()
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeSync(w, st)
}
