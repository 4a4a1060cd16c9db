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

// TestWrapEnvelopes answers through the admin API's wrapper (a.ok,
// a.created and the envelopes encoder) and compares the exact bytes: a
// value in the sync envelope with 200, a created one with 201, each errdefs
// kind with its status and the error envelope, a fiber error with its own
// code, and a path parameter refused before the handler runs. Nothing of
// these is logged.
func TestWrapEnvelopes(t *testing.T) {
	var logBuf bytes.Buffer
	a := &API{cfg: Config{BodyLimit: 1 << 20}, log: slog.New(slog.NewTextHandler(&logBuf, nil))}
	app := fiber.New(FiberConfig(0))
	ran := false
	value := func(v any) handler {
		return func(*request) (any, error) { ran = true; return v, nil }
	}
	failing := func(err error) handler {
		return func(*request) (any, error) { ran = true; return nil, err }
	}
	app.Get("/value", a.ok(value(map[string]string{"k": "v"})))
	app.Get("/nil", a.ok(value(nil)))
	app.Get("/created", a.created(value([]string{"x"})))
	app.Get("/instances/:name", a.ok(func(r *request) (any, error) { ran = true; return r.Param("name"), nil }, instanceNameParam))
	app.Get("/pools/:pool/volumes/:volume", a.ok(value("v"), poolParam, volumeParam))
	app.Get("/fiber", a.ok(failing(fiber.NewError(501, "this daemon has no image store"))))
	for _, kind := range []error{errdefs.ErrNotFound, errdefs.ErrAlreadyExists, errdefs.ErrInvalid, errdefs.ErrConflict,
		errdefs.ErrForbidden, errdefs.ErrUnauthorized, errdefs.ErrNotSupported, errdefs.ErrUnavailable, errdefs.ErrNoSpace} {
		app.Get("/kind/"+strings.ReplaceAll(kind.Error(), " ", "-"), a.ok(failing(fmt.Errorf("doing web1: %w", kind))))
	}
	sync := func(meta string) string {
		return `{"type":"sync","status":"Success","status_code":200,"operation":"","error_code":0,"error":"","metadata":` + meta + `}`
	}
	fail := func(code int, msg string) string {
		return fmt.Sprintf(`{"type":"error","status":"","status_code":0,"operation":"","error_code":%d,"error":%q,"metadata":null}`, code, msg)
	}
	for _, tc := range []struct {
		path string
		code int
		body string
		ran  bool // whether the handler ran
	}{
		{"/value", 200, sync(`{"k":"v"}`), true},
		{"/nil", 200, sync(`null`), true},
		{"/created", 201, sync(`["x"]`), true},
		{"/instances/web1", 200, sync(`"web1"`), true},
		{"/instances/web%201", 400, fail(400, `invalid instance name "web 1": character ' ' at position 3 is not a letter, digit or hyphen: invalid argument`), false},
		{"/instances/a%2", 400, fail(400, `invalid instance name "a%2": bad escape`), false},
		{"/pools/p%2/volumes/v", 400, fail(400, `invalid pool "p%2"`), false},
		{"/pools/p/volumes/v%2", 400, fail(400, `invalid volume "v%2"`), false},
		{"/fiber", 501, fail(501, "this daemon has no image store"), true},
		{"/kind/not-found", 404, fail(404, "doing web1: not found"), true},
		{"/kind/already-exists", 409, fail(409, "doing web1: already exists"), true},
		{"/kind/invalid-argument", 400, fail(400, "doing web1: invalid argument"), true},
		{"/kind/conflict", 409, fail(409, "doing web1: conflict"), true},
		{"/kind/forbidden", 403, fail(403, "doing web1: forbidden"), true},
		{"/kind/unauthorized", 401, fail(401, "doing web1: unauthorized"), true},
		{"/kind/not-supported", 501, fail(501, "doing web1: not supported"), true},
		{"/kind/unavailable", 503, fail(503, "doing web1: unavailable"), true},
		{"/kind/insufficient-storage", 507, fail(507, "doing web1: insufficient storage"), true},
	} {
		t.Run(tc.path, func(t *testing.T) {
			ran = false
			logBuf.Reset()
			code, body, ctype := wrapGet(t, app, tc.path)
			if code != tc.code || body != tc.body || ran != tc.ran || ctype != fiber.MIMEApplicationJSON {
				t.Errorf("GET %s: %d %s %s (handler ran: %v)\nwant %d %s (ran: %v)", tc.path, code, ctype, body, ran, tc.code, tc.body, tc.ran)
			}
			if logBuf.Len() != 0 {
				t.Errorf("logged %q; want nothing logged for a 4xx or a known 5xx without a path", logBuf.String())
			}
		})
	}
}

// TestWrapInternalErrors answers a handler's panic and an error of no kind
// through the wrapper: 500 in the error envelope, the host paths of the
// message replaced, a request id the log line carries with the full error
// (and a panic's stack). The daemon keeps serving after the panic.
func TestWrapInternalErrors(t *testing.T) {
	const dir = "/var/lib/guestlink-test"
	var logBuf bytes.Buffer
	a := &API{cfg: Config{BodyLimit: 1 << 20}, log: slog.New(slog.NewTextHandler(&logBuf, nil))}
	app := fiber.New(FiberConfig(0))
	app.Get("/1.0/panic", a.ok(func(*request) (any, error) { panic("open " + dir + "/state.db: corrupt") }))
	app.Get("/1.0/nilmap", a.ok(func(*request) (any, error) {
		var m map[string]int
		m["x"]++ // a runtime panic: assignment to entry in nil map
		return m, nil
	}))
	app.Get("/1.0/unknown", a.ok(func(*request) (any, error) {
		return nil, fmt.Errorf("writing %s/instances/web1.json: %w", dir, errors.New("disk quota exceeded"))
	}))
	idRE := ` \(request ([0-9a-f]{16}); the daemon's log has the detail\)$`
	for _, tc := range []struct {
		path, msg string // msg: a regexp of the message answered
		panicked  bool
	}{
		{"/1.0/panic", `^panic serving GET /1.0/panic: open <path>: corrupt` + idRE, true},
		{"/1.0/nilmap", `^panic serving GET /1.0/nilmap: assignment to entry in nil map` + idRE, true},
		{"/1.0/unknown", `^writing <path>: disk quota exceeded` + idRE, false},
	} {
		t.Run(tc.path, func(t *testing.T) {
			logBuf.Reset()
			code, body, _ := wrapGet(t, app, tc.path)
			var env struct {
				Type  string `json:"type"`
				Code  int    `json:"error_code"`
				Error string `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &env); err != nil || code != 500 || env.Code != 500 || env.Type != "error" {
				t.Fatalf("%d %s (%v); want 500 in the error envelope", code, body, err)
			}
			m := regexp.MustCompile(tc.msg).FindStringSubmatch(env.Error)
			if m == nil || strings.Contains(body, dir) {
				t.Fatalf("message %q; want it to match %q, without %s", env.Error, tc.msg, dir)
			}
			line := logBuf.String()
			if !strings.Contains(line, "request_id="+m[1]) {
				t.Errorf("log %q lacks request_id=%s", line, m[1])
			}
			if hasStack := strings.Contains(line, "stack=") && strings.Contains(line, "wrap_internal_test.go"); hasStack != tc.panicked {
				t.Errorf("log %q: stack of the handler logged %v, want %v", line, hasStack, tc.panicked)
			}
		})
	}
}

func wrapGet(t *testing.T, app *fiber.App, path string) (code int, body, contentType string) {
	t.Helper()
	req := httptest.NewRequest("GET", "/", nil)
	req.RequestURI = path // sent as it is, bad escapes included
	resp, err := app.Test(req, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header.Get(fiber.HeaderContentType)
}
