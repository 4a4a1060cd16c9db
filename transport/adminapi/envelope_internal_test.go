package adminapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/errdefs"
)

// TestErrorBodiesWithoutHostPaths answers errors of each kind through the
// envelope: a 500 of no kind and a 503 whose message names a file lose
// the path and get a request id that the log line carries with the full
// error; a 503 of the API's own words and a 4xx are answered as they are.
func TestErrorBodiesWithoutHostPaths(t *testing.T) {
	const dir = "/var/lib/guestlink-test"
	var logBuf bytes.Buffer
	a := &API{cfg: Config{BodyLimit: 1 << 20}, log: slog.New(slog.NewTextHandler(&logBuf, nil))}
	app := fiber.New(FiberConfig(0))
	fail := map[string]error{
		"/internal":  fmt.Errorf("creating storage volume default/v: open %s/storage-pools/default/custom/v.raw: permission denied", dir),
		"/plugin":    fmt.Errorf("backend qemu: plugin %s/bin/plugins/qemu exited: %w", dir, errdefs.ErrUnavailable),
		"/busy":      fiber.NewError(503, "the daemon is shutting down"),
		"/invalid":   fmt.Errorf("invalid device \"d1\": source \"/etc\" is a host path: %w", errdefs.ErrInvalid),
		"/unwrapped": errors.New("database is locked"),
	}
	app.Use(a.envelopeErrors)
	for p, err := range fail {
		app.Get(p, func(*fiber.Ctx) error { return err })
	}
	idRE := `\(request ([0-9a-f]{16}); the daemon's log has the detail\)$`
	for _, tc := range []struct {
		path   string
		code   int
		msg    string // a regexp when logged, else the exact message
		logged bool
	}{
		{"/internal", 500, `^creating storage volume default/v: open <path>: permission denied ` + idRE, true},
		{"/plugin", 503, `^backend qemu: plugin <path> exited: unavailable ` + idRE, true},
		{"/unwrapped", 500, `^database is locked ` + idRE, true},
		{"/busy", 503, "the daemon is shutting down", false},
		{"/invalid", 400, `invalid device "d1": source "/etc" is a host path: invalid argument`, false},
	} {
		t.Run(tc.path, func(t *testing.T) {
			logBuf.Reset()
			resp, err := app.Test(httptest.NewRequest("GET", tc.path, nil), -1)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			var env struct {
				Code  int    `json:"error_code"`
				Error string `json:"error"`
			}
			if err := json.Unmarshal(body, &env); err != nil || resp.StatusCode != tc.code || env.Code != tc.code {
				t.Fatalf("%d %s (%v), want %d", resp.StatusCode, body, err, tc.code)
			}
			if !tc.logged {
				if env.Error != tc.msg || logBuf.Len() != 0 {
					t.Errorf("message %q, log %q; want %q and no log line", env.Error, logBuf.String(), tc.msg)
				}
				return
			}
			m := regexp.MustCompile(tc.msg).FindStringSubmatch(env.Error)
			if m == nil || strings.Contains(env.Error, dir) {
				t.Fatalf("message %q, want it to match %q without %s", env.Error, tc.msg, dir)
			}
			line := logBuf.String()
			if !strings.Contains(line, "request_id="+m[1]) || !strings.Contains(line, fail[tc.path].Error()) {
				t.Errorf("log %q lacks request_id=%s and the full error %q", line, m[1], fail[tc.path].Error())
			}
		})
	}
}
