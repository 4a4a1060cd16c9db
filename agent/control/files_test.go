package control

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/agent/features"
	"github.com/guestlink/guestlink/agent/files"
	"github.com/guestlink/guestlink/agent/gueststate"
	"github.com/guestlink/guestlink/api"
)

// TestFilesRoute drives /1.0/files on a guest root through the handler:
// push, pull, directory listing, headers, bad paths, missing files, the
// feature switch.
func TestFilesRoute(t *testing.T) {
	root := t.TempDir()
	h := &Handler{Files: files.New(root), Features: features.New(root)}
	do := func(method, path string, body string, hdr map[string]string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, "/1.0/files?path="+url.QueryEscape(path), strings.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	if w := do(http.MethodPost, "/hello", "hi\n", map[string]string{HeaderMode: "0600", HeaderUID: "-1"}); w.Code != 200 {
		t.Fatalf("push: %d %s", w.Code, w.Body)
	}
	w := do(http.MethodGet, "/hello", "", nil)
	if w.Code != 200 || w.Body.String() != "hi\n" || w.Header().Get(HeaderType) != "file" || w.Header().Get(HeaderMode) != "0600" {
		t.Fatalf("pull: %d %q %v", w.Code, w.Body, w.Header())
	}
	if w := do(http.MethodPost, "/d", "", map[string]string{HeaderType: "directory", HeaderMode: "1777"}); w.Code != 200 {
		t.Fatalf("mkdir: %d %s", w.Code, w.Body)
	}
	w = do(http.MethodGet, "/", "", nil)
	var env struct {
		Metadata []string `json:"metadata"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &env); err != nil || w.Header().Get(HeaderType) != "directory" || strings.Join(env.Metadata, ",") != "d,hello" {
		t.Fatalf("list: %d %s %v", w.Code, w.Body, err)
	}
	if got := do(http.MethodGet, "/d", "", nil).Header().Get(HeaderMode); got != "1777" {
		t.Errorf("sticky directory mode: %q", got)
	}
	for _, tc := range []struct {
		name, method, path string
		hdr                map[string]string
		want               int
	}{
		{"relative", http.MethodGet, "hello", nil, 400},
		{"dot dot", http.MethodGet, "/d/../../etc/passwd", nil, 400},
		{"NUL", http.MethodGet, "/hel\x00lo", nil, 400},
		{"missing", http.MethodGet, "/nope", nil, 404},
		{"delete missing", http.MethodDelete, "/nope", nil, 404},
		{"bad mode", http.MethodPost, "/x", map[string]string{HeaderMode: "0999"}, 400},
		{"bad uid", http.MethodPost, "/x", map[string]string{HeaderUID: "root"}, 400},
		{"bad write", http.MethodPost, "/x", map[string]string{HeaderWrite: "truncate"}, 400},
		{"bad type", http.MethodPost, "/x", map[string]string{HeaderType: "fifo"}, 400},
		{"method", http.MethodPut, "/hello", nil, 405},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if w := do(tc.method, tc.path, "x", tc.hdr); w.Code != tc.want {
				t.Errorf("%s %q = %d %s, want %d", tc.method, tc.path, w.Code, w.Body, tc.want)
			}
		})
	}
	req := httptest.NewRequest(http.MethodGet, "/1.0/files", nil)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != 400 {
		t.Errorf("no path: %d", w.Code)
	}
	if w := do(http.MethodDelete, "/hello", "", nil); w.Code != 200 {
		t.Errorf("delete: %d %s", w.Code, w.Body)
	}

	// The guest's admin switches files off: 403 naming the switch.
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	if err := os.WriteFile(filepath.Join(root, "etc", "guestlink-agent.yaml"), []byte("features:\n  files: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w = do(http.MethodGet, "/d", "", nil)
	if w.Code != 403 || !strings.Contains(w.Body.String(), "features.files: false in /etc/guestlink-agent.yaml") {
		t.Errorf("switched off: %d %s", w.Code, w.Body)
	}
}

// TestStateRoute asks GET /1.0/state of a guest root, then with "state"
// switched off (403 naming the switch).
func TestStateRoute(t *testing.T) {
	root := t.TempDir()
	h := &Handler{Features: features.New(root), State: &gueststate.Collector{Root: root}}
	get := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/1.0/state", nil))
		return w
	}
	w := get()
	var env struct {
		Metadata api.GuestState `json:"metadata"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &env); w.Code != 200 || err != nil || len(env.Metadata.Network) == 0 {
		t.Fatalf("state: %d %s %v", w.Code, w.Body, err)
	}
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc", "guestlink-agent.yaml"), []byte("features:\n  state: false\n"), 0o644)
	if w := get(); w.Code != 403 || !strings.Contains(w.Body.String(), "features.state: false") {
		t.Errorf("state off: %d %s", w.Code, w.Body)
	}
}

// TestExecSwitch switches exec off in the guest: POST /1.0/exec answers 403
// naming the switch and never reaches the exec server.
func TestExecSwitch(t *testing.T) {
	root := t.TempDir()
	reached := 0
	h := &Handler{Features: features.New(root), Exec: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ })}
	post := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/1.0/exec", strings.NewReader(`{"command":["true"]}`)))
		return w
	}
	post()
	if reached != 1 {
		t.Fatalf("exec on: reached %d times", reached)
	}
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc", "guestlink-agent.yaml"), []byte("features:\n  exec: false\n"), 0o644)
	if w := post(); w.Code != 403 || !strings.Contains(w.Body.String(), "features.exec: false in /etc/guestlink-agent.yaml") || reached != 1 {
		t.Errorf("exec off: %d %s, reached %d times", w.Code, w.Body, reached)
	}
}
