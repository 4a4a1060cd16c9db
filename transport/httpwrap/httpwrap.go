// Package httpwrap turns route handlers that return a value or an error into
// fiber handlers, so that a transport's handlers hold no answering
// boilerplate: one Encoder writes every value and every error of a
// transport (its envelopes, its status mapping), path parameters are parsed
// and validated before the handler runs, and a panicking handler is
// answered as an internal error instead of taking the process down. It is
// modelled on Nomad's HTTPServer.wrap.
package httpwrap

import (
	"fmt"
	"net/http"
	"runtime/debug"

	"github.com/gofiber/fiber/v2"
)

// Handler answers one request: the value the Encoder writes, or an error it
// maps. A Handler may set headers on r before it returns; it writes no body.
type Handler func(r *Request) (any, error)

// Request is a request as a Handler sees it: the fiber context and the
// route's path parameters, already parsed and validated.
type Request struct {
	*fiber.Ctx
	params []paramValue
}

type paramValue struct{ key, value string }

// Param returns the parsed value of the path parameter key. It panics when
// the route declared no such Param: a wiring bug, answered as an internal
// error by the wrapper.
func (r *Request) Param(key string) string {
	for _, p := range r.params {
		if p.key == key {
			return p.value
		}
	}
	panic(fmt.Sprintf("httpwrap: route %s declares no path parameter %q", r.Route().Path, key))
}

// Param declares a path parameter of a route. Key is its name in the route
// pattern (":pool" is "pool"); Parse turns the raw value, as it stands in
// the path (still escaped), into the value Request.Param returns, or
// returns the error the Encoder answers (the handler does not run then).
type Param struct {
	Key   string
	Parse func(raw string) (string, error)
}

// Encoder writes a transport's answers. Value writes a handler's value with
// the route's success status; Error writes an error of a handler, of a
// parameter's Parse or a recovered panic (a *PanicError), mapping it to a
// status and the transport's error envelope. Both return what the fiber
// handler returns (nil once the answer is written).
type Encoder interface {
	Value(c *fiber.Ctx, status int, v any) error
	Error(c *fiber.Ctx, err error) error
}

// PanicError is a panic recovered from a Handler or a Parse: Value is what
// was passed to panic, Stack the goroutine's stack where it was recovered.
// It wraps no error kind, so transports answer it as an internal error;
// its message holds no stack.
type PanicError struct {
	Method, Path string
	Value        any
	Stack        []byte
}

// Error returns "panic serving METHOD PATH: VALUE".
func (e *PanicError) Error() string {
	return fmt.Sprintf("panic serving %s %s: %v", e.Method, e.Path, e.Value)
}

// Wrapper turns Handlers into fiber handlers answering through Encoder.
type Wrapper struct {
	Encoder Encoder
}

// OK returns the fiber handler of a route answered with 200 and h's value.
func (w Wrapper) OK(h Handler, params ...Param) fiber.Handler {
	return w.Wrap(http.StatusOK, h, params...)
}

// Created returns the fiber handler of a route that makes something:
// answered with 201 and h's value.
func (w Wrapper) Created(h Handler, params ...Param) fiber.Handler {
	return w.Wrap(http.StatusCreated, h, params...)
}

// Wrap returns the fiber handler of a route: it parses params in order
// (the first error is answered), calls h and answers its value with status,
// or its error. A panic of h or of a Parse is recovered and answered as a
// *PanicError.
func (w Wrapper) Wrap(status int, h Handler, params ...Param) fiber.Handler {
	return func(c *fiber.Ctx) (ret error) {
		defer func() {
			if p := recover(); p != nil {
				ret = w.Encoder.Error(c, &PanicError{Method: c.Method(), Path: c.Path(), Value: p, Stack: debug.Stack()})
			}
		}()
		r := &Request{Ctx: c}
		if len(params) > 0 {
			r.params = make([]paramValue, len(params))
			for i, p := range params {
				v, err := p.Parse(c.Params(p.Key))
				if err != nil {
					return w.Encoder.Error(c, err)
				}
				r.params[i] = paramValue{p.Key, v}
			}
		}
		v, err := h(r)
		if err != nil {
			return w.Encoder.Error(c, err)
		}
		return w.Encoder.Value(c, status, v)
	}
}

// With returns a Handler that first gets the service h needs from get (its
// error is answered, h does not run) and then calls h with it: the routes
// of an optional service say once that they need it.
func With[S any](get func() (S, error), h func(r *Request, s S) (any, error)) Handler {
	return func(r *Request) (any, error) {
		s, err := get()
		if err != nil {
			return nil, err
		}
		return h(r, s)
	}
}
