package control

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/agent/features"
	"github.com/guestlink/guestlink/agent/fsfreeze"
	"github.com/guestlink/guestlink/api"
)

// recordingFreezer stands in for the guest's freezer: the route's tests
// must not freeze the host.
type recordingFreezer struct {
	calls   []string
	timeout time.Duration
	err     error
}

func (f *recordingFreezer) Freeze(_ context.Context, timeout time.Duration) (*api.FreezeState, error) {
	f.calls, f.timeout = append(f.calls, "freeze"), timeout
	if f.err != nil {
		return nil, f.err
	}
	return &api.FreezeState{Frozen: []string{"/"}, Thawed: []string{}, Timeout: int(timeout / time.Second)}, nil
}

func (f *recordingFreezer) Thaw(context.Context) (*api.FreezeState, error) {
	f.calls = append(f.calls, "thaw")
	return &api.FreezeState{Frozen: []string{}, Thawed: []string{"/"}}, f.err
}

// TestFreezeRoute drives POST /1.0/freeze and /1.0/thaw through the
// handler: the answers, the timeout's bounds, the feature switch, and the
// real freezer of a simulated guest (a directory root) answering 501.
func TestFreezeRoute(t *testing.T) {
	root := t.TempDir()
	do := func(h *Handler, method, path, body string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(body)))
		return w
	}
	fr := &recordingFreezer{}
	h := &Handler{Freeze: fr, Features: features.New(root)}
	if w := do(h, http.MethodPost, "/1.0/freeze", `{"timeout": 30}`); w.Code != 200 || !strings.Contains(w.Body.String(), `"frozen":["/"]`) {
		t.Fatalf("freeze: %d %s", w.Code, w.Body)
	}
	if fr.timeout != 30*time.Second {
		t.Errorf("timeout passed = %s, want 30s", fr.timeout)
	}
	if w := do(h, http.MethodPost, "/1.0/thaw", ""); w.Code != 200 || !strings.Contains(w.Body.String(), `"thawed":["/"]`) {
		t.Fatalf("thaw: %d %s", w.Code, w.Body)
	}
	if w := do(h, http.MethodPost, "/1.0/freeze", ""); w.Code != 200 || fr.timeout != 0 {
		t.Fatalf("freeze without a body: %d %s, timeout %s (want 0: the freezer's default)", w.Code, w.Body, fr.timeout)
	}
	for _, tc := range []struct {
		name, method, path, body string
		want                     int
	}{
		{"GET", http.MethodGet, "/1.0/freeze", "", http.StatusMethodNotAllowed},
		{"negative timeout", http.MethodPost, "/1.0/freeze", `{"timeout": -1}`, http.StatusBadRequest},
		{"timeout over the maximum", http.MethodPost, "/1.0/freeze", `{"timeout": 601}`, http.StatusBadRequest},
		{"unknown field", http.MethodPost, "/1.0/freeze", `{"timeout": 1, "x": 1}`, http.StatusBadRequest},
		{"not JSON", http.MethodPost, "/1.0/freeze", `timeout`, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := len(fr.calls)
			if w := do(h, tc.method, tc.path, tc.body); w.Code != tc.want {
				t.Fatalf("%s %s %q = %d %s, want %d", tc.method, tc.path, tc.body, w.Code, w.Body, tc.want)
			}
			if len(fr.calls) != n {
				t.Errorf("the freezer was called for a refused request")
			}
		})
	}
	t.Run("already frozen", func(t *testing.T) {
		h := &Handler{Freeze: &recordingFreezer{err: fsfreeze.ErrFrozen}}
		if w := do(h, http.MethodPost, "/1.0/freeze", ""); w.Code != http.StatusConflict {
			t.Fatalf("freeze while frozen = %d %s, want 409", w.Code, w.Body)
		}
	})
	t.Run("switched off", func(t *testing.T) {
		if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, features.GuestPath), []byte("features:\n  freeze: false\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(filepath.Join(root, features.GuestPath))
		n := len(fr.calls)
		for _, p := range []string{"/1.0/freeze", "/1.0/thaw"} {
			w := do(h, http.MethodPost, p, "")
			if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "features.freeze: false") {
				t.Errorf("POST %s switched off = %d %s, want 403 naming the switch", p, w.Code, w.Body)
			}
		}
		if len(fr.calls) != n {
			t.Error("the freezer was called with the switch off")
		}
	})
	t.Run("simulated guest", func(t *testing.T) {
		h := &Handler{Freeze: fsfreeze.New(root, nil)}
		w := do(h, http.MethodPost, "/1.0/freeze", "")
		if w.Code != http.StatusNotImplemented || !strings.Contains(w.Body.String(), "not supported") {
			t.Fatalf("freeze on a directory root = %d %s, want 501", w.Code, w.Body)
		}
	})
}
