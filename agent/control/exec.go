package control

import (
	"net/http"

	"github.com/guestlink/guestlink/agent/exec"
	"github.com/guestlink/guestlink/agent/features"
)

// serveExec serves the exec routes (POST /1.0/exec, /1.0/operations/...)
// through h.Exec and reports whether the path was one of them.
func (h *Handler) serveExec(w http.ResponseWriter, r *http.Request) bool {
	if h.Exec == nil || !exec.Handles(r.URL.Path) {
		return false
	}
	if !h.feature(w, features.Exec) {
		return true // 403 naming the switch (files.go)
	}
	h.Exec.ServeHTTP(w, r)
	return true
}
