package httpwrap_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/transport/httpwrap"
)

// textEncoder answers "STATUS value" and "ERR message" in plain text and
// keeps the last error it was given, so a test sees what the wrapper
// handed it.
type textEncoder struct{ last error }

func (e *textEncoder) Value(c *fiber.Ctx, status int, v any) error {
	return c.Status(status).SendString(fmt.Sprintf("%d %v", status, v))
}

func (e *textEncoder) Error(c *fiber.Ctx, err error) error {
	e.last = err
	return c.Status(http.StatusTeapot).SendString("ERR " + err.Error())
}

var errNoService = errors.New("no service")

// upper is a Param that refuses "bad" and upper-cases the rest.
func upper(key string) httpwrap.Param {
	return httpwrap.Param{Key: key, Parse: func(raw string) (string, error) {
		if raw == "bad" {
			return "", fmt.Errorf("invalid %s %q", key, raw)
		}
		return strings.ToUpper(raw), nil
	}}
}

// TestWrap drives wrapped handlers through a fiber app: the success status
// of each kind of route, path parameters parsed in order (the first bad one
// answered and the handler not run), With's service check, and panics (of
// a handler, and of reading a parameter the route did not declare)
// answered as a *PanicError with its stack instead of ending the process.
func TestWrap(t *testing.T) {
	enc := &textEncoder{}
	w := httpwrap.Wrapper{Encoder: enc}
	ran := 0
	echo := func(r *httpwrap.Request) (any, error) {
		ran++
		return r.Param("a") + "/" + r.Param("b"), nil
	}
	var svc *string // nil: the service is missing
	getSvc := func() (string, error) {
		if svc == nil {
			return "", errNoService
		}
		return *svc, nil
	}
	app := fiber.New()
	app.Get("/ok/:a/:b", w.OK(echo, upper("a"), upper("b")))
	app.Post("/made/:a/:b", w.Created(echo, upper("a"), upper("b")))
	app.Put("/accepted", w.Wrap(http.StatusAccepted, func(*httpwrap.Request) (any, error) { return "queued", nil }))
	app.Get("/fail", w.OK(func(*httpwrap.Request) (any, error) { return nil, errors.New("it broke") }))
	app.Get("/panic", w.OK(func(*httpwrap.Request) (any, error) { panic("boom") }))
	app.Get("/undeclared/:x", w.OK(func(r *httpwrap.Request) (any, error) { return r.Param("x"), nil }))
	app.Get("/svc", w.OK(httpwrap.With(getSvc, func(_ *httpwrap.Request, s string) (any, error) {
		ran++
		return "using " + s, nil
	})))

	for _, tc := range []struct {
		name, method, path string
		code               int
		body               string
		ran                bool // whether the handler ran
		svc                *string
	}{
		{"value", "GET", "/ok/x/y", 200, "200 X/Y", true, nil},
		{"created", "POST", "/made/x/y", 201, "201 X/Y", true, nil},
		{"any status", "PUT", "/accepted", 202, "202 queued", false, nil},
		{"first param bad", "GET", "/ok/bad/bad", 418, `ERR invalid a "bad"`, false, nil},
		{"second param bad", "GET", "/ok/x/bad", 418, `ERR invalid b "bad"`, false, nil},
		{"handler error", "GET", "/fail", 418, "ERR it broke", false, nil},
		{"service missing", "GET", "/svc", 418, "ERR no service", false, nil},
		{"service there", "GET", "/svc", 200, "200 using store", true, ptr("store")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ran, svc = 0, tc.svc
			code, body := do(t, app, tc.method, tc.path)
			if code != tc.code || body != tc.body || (ran == 1) != tc.ran {
				t.Errorf("%s %s: %d %q (handler ran %d times), want %d %q (ran: %v)", tc.method, tc.path, code, body, ran, tc.code, tc.body, tc.ran)
			}
		})
	}

	for _, tc := range []struct{ name, path, value string }{
		{"handler panics", "/panic", "boom"},
		{"undeclared parameter", "/undeclared/v", `httpwrap: route /undeclared/:x declares no path parameter "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc.last = nil
			code, body := do(t, app, "GET", tc.path)
			var pe *httpwrap.PanicError
			if code != 418 || !errors.As(enc.last, &pe) {
				t.Fatalf("%d %q, encoder got %v; want the panic as a *PanicError", code, body, enc.last)
			}
			want := "panic serving GET " + tc.path + ": " + tc.value
			if pe.Value != tc.value || body != "ERR "+want || !strings.Contains(string(pe.Stack), "httpwrap_test.go") {
				t.Errorf("panic %v answered %q with stack %q; want value %q, answer %q and this test's frame", pe.Value, body, pe.Stack, tc.value, "ERR "+want)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func do(t *testing.T, app *fiber.App, method, path string) (int, string) {
	t.Helper()
	resp, err := app.Test(httptest.NewRequest(method, path, nil), -1)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
