package web

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/errdefs"
)

// fakeFiles answers the agent's GET /1.0/files?path= as the agent does
// (agent/control): a file's bytes with LXD's headers, a directory's
// entries, LXD's error envelope; an instance without a connected agent is
// errdefs.ErrConflict, as core/agentmon answers.
type fakeFiles struct {
	asked []string
}

func (f *fakeFiles) AgentDo(uuid string, req *http.Request) (*http.Response, error) {
	p := req.URL.Query().Get("path")
	f.asked = append(f.asked, uuid+" "+req.Method+" "+p)
	answer := func(status int, typ, body string) *http.Response {
		h := http.Header{"Content-Type": {"application/octet-stream"}}
		if typ != "" {
			h.Set("X-LXD-type", typ)
		}
		return &http.Response{StatusCode: status, Status: http.StatusText(status), Header: h,
			Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}
	}
	envelope := func(status int, msg string) *http.Response {
		return answer(status, "", fmt.Sprintf(`{"type":"error","error":%q,"error_code":%d}`, msg, status))
	}
	switch p {
	case "/etc/hostname":
		return answer(http.StatusOK, "file", "web1\x00\n"), nil
	case "/etc/naïve name.txt":
		return answer(http.StatusOK, "file", "x"), nil
	case "/etc":
		return answer(http.StatusOK, "directory", `{"type":"sync","metadata":["hostname"]}`), nil
	case "/link":
		return answer(http.StatusOK, "symlink", "/etc/hostname"), nil
	case "/secret":
		return envelope(http.StatusForbidden, `files are switched off in this guest (/etc/guestlink-agent.yaml: files: false)`), nil
	case "/stopped":
		return nil, fmt.Errorf("the agent of instance %q is not connected (lost): %w", "web1", errdefs.ErrConflict)
	}
	return envelope(http.StatusNotFound, `reading "`+p+`": no such file or directory`), nil
}

// TestDownloadFile downloads guest files from the instance page's form:
// a regular file comes as an attachment named after it, byte for byte;
// what cannot be downloaded (no such file, a directory, a symlink, files
// switched off in the guest, no connected agent, a relative path, no path)
// is the instance page again with a readable reason beside the form and
// the status the admin API would answer, never the agent's JSON.
func TestDownloadFile(t *testing.T) {
	files := &fakeFiles{}
	app, d := newTestApp(newFakeInstances(ready("web1", time.Minute, time.Second)), newBusEvents(), Config{Files: files})
	defer d.Close()

	res, body, _ := get(t, app, "/instances/web1/files?path=/etc/hostname")
	if res.StatusCode != http.StatusOK || body != "web1\x00\n" {
		t.Fatalf("GET /etc/hostname: %d %q, want 200 with the file's bytes", res.StatusCode, body)
	}
	if got := res.Header.Get("Content-Disposition"); got != `attachment; filename=hostname` {
		t.Errorf("Content-Disposition %q, want an attachment named hostname", got)
	}
	if got := res.Header.Get("Content-Type"); got != "application/octet-stream" {
		t.Errorf("Content-Type %q, want application/octet-stream", got)
	}
	wantSecurityHeaders(t, "a download", res.Header)
	res, _, _ = get(t, app, "/instances/web1/files?path="+url.QueryEscape("/etc/naïve name.txt"))
	if got := res.Header.Get("Content-Disposition"); got != `attachment; filename*=utf-8''na%C3%AFve%20name.txt` {
		t.Errorf("Content-Disposition of a name with a space and a non-ASCII letter: %q", got)
	}

	tests := []struct {
		name, path string
		status     int
		want       string
	}{
		{"no such file", "/srv/missing", http.StatusNotFound, `no file /srv/missing in instance "web1"`},
		{"a directory", "/etc", http.StatusUnprocessableEntity, `/etc in instance "web1" is a directory: only a regular file can be downloaded`},
		{"a symlink", "/link", http.StatusUnprocessableEntity, `/link in instance "web1" is a symbolic link`},
		{"files switched off in the guest", "/secret", http.StatusForbidden, "files are switched off in this guest (/etc/guestlink-agent.yaml: files: false)"},
		{"agent not connected", "/stopped", http.StatusConflict, "is not connected"},
		{"a relative path", "etc/hostname", http.StatusBadRequest, "absolute"},
		{"no path", "", http.StatusBadRequest, "give the absolute path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			asked := len(files.asked)
			res, body, doc := get(t, app, "/instances/web1/files?path="+url.QueryEscape(tt.path))
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", res.StatusCode, tt.status)
			}
			if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
				t.Errorf("Content-Type %q, want the instance page", ct)
			}
			if cd := res.Header.Get("Content-Disposition"); cd != "" {
				t.Errorf("a refusal is an attachment: %q", cd)
			}
			msg := doc.Find(`[data-testid="download-error"]`)
			if msg.AttrOr("role", "") != "alert" || !strings.Contains(msg.Text(), tt.want) {
				t.Fatalf("the page's message %q (role %q), want an alert with %q\n%s", msg.Text(), msg.AttrOr("role", ""), tt.want, body)
			}
			in := doc.Find(`[data-testid="download-path"]`)
			if in.AttrOr("value", "") != tt.path || in.AttrOr("aria-invalid", "") != "true" {
				t.Errorf("the path field: value %q aria-invalid %q, want %q and true", in.AttrOr("value", ""), in.AttrOr("aria-invalid", ""), tt.path)
			}
			if doc.Find(`[data-testid="instance-name"]`).Text() != "web1" {
				t.Error("not the instance page")
			}
			checkedFirst := tt.status == http.StatusBadRequest
			if checkedFirst && len(files.asked) != asked {
				t.Errorf("a bad path reached the agent: %v", files.asked[asked:])
			}
		})
	}

	// Without Files the page has no form and the route says so.
	app, d2 := newTestApp(newFakeInstances(ready("web1", time.Minute, time.Second)), newBusEvents(), Config{})
	defer d2.Close()
	if _, _, doc := get(t, app, "/instances/web1"); doc.Find(`[data-testid="download-form"]`).Length() != 0 {
		t.Error("a download form on a dashboard that downloads no files")
	}
	if res, _, _ := get(t, app, "/instances/web1/files?path=/etc/hostname"); res.StatusCode != http.StatusNotImplemented {
		t.Errorf("GET files without Files: %d, want 501", res.StatusCode)
	}
}
