package control

import (
	"net/http"

	"github.com/guestlink/guestlink/agent/exec"
)

// serveExec serves the exec routes (POST /1.0/exec, /1.0/operations/...)
// through h.Exec and reports whether the path was one of them.
func (h *Handler) serveExec(w http.ResponseWriter, r *http.Request) bool {
	if h.Exec == nil || !exec.Handles(r.URL.Path) {
		return false
	}
	h.Exec.ServeHTTP(w, r)
	return true
}
