package adminapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/api/utf8check"
	"github.com/guestlink/guestlink/core/redact"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/transport/httpwrap"
)

// sync200 answers 200 with the sync envelope around metadata.
func sync200(c *fiber.Ctx, metadata any) error {
	return c.Status(http.StatusOK).JSON(api.Sync(metadata))
}

// syncCreated answers 201 with the sync envelope around metadata.
func syncCreated(c *fiber.Ctx, metadata any) error {
	return c.Status(http.StatusCreated).JSON(api.Sync(metadata))
}

// badRequest returns a 400 error with a formatted message.
func badRequest(format string, args ...any) error {
	return fiber.NewError(http.StatusBadRequest, fmt.Sprintf(format, args...))
}

// writeError answers err in the error envelope: fiber errors keep their
// code, service errors are mapped through their errdefs kind. A 5xx
// answer never carries a host path (core/redact): an unexpected error
// (500 of no known kind), or one whose message had a path removed, is
// logged in full to log under a request id (with the stack of a handler's
// panic), and the client gets the message without paths and that id.
func writeError(c *fiber.Ctx, err error, bodyLimit int, log *slog.Logger) error {
	code, msg := errdefs.HTTPStatus(err), err.Error()
	var fe *fiber.Error
	isFiber := errors.As(err, &fe)
	if isFiber {
		code, msg = fe.Code, fe.Message
		switch code {
		case http.StatusNotFound:
			if msg == fiber.ErrNotFound.Message || msg == "Cannot "+c.Method()+" "+c.Path() {
				msg = fmt.Sprintf("no such endpoint: %s %s", c.Method(), c.Path())
			}
		case http.StatusMethodNotAllowed:
			msg = fmt.Sprintf("method %s not allowed on %s", c.Method(), c.Path())
		case http.StatusRequestEntityTooLarge:
			msg = fmt.Sprintf("request body too large: the limit is %d bytes", bodyLimit)
		}
	}
	if code >= http.StatusInternalServerError {
		if red := redact.Paths(msg); red != msg || (code == http.StatusInternalServerError && !isFiber) {
			id := redact.NewRequestID()
			if log == nil {
				log = slog.Default()
			}
			attrs := []any{"request_id", id, "method", c.Method(), "path", c.Path(), "status", code, "err", err}
			if pe := (*httpwrap.PanicError)(nil); errors.As(err, &pe) {
				attrs = append(attrs, "stack", string(pe.Stack))
			}
			log.Error("admin API request failed", attrs...)
			msg = redact.Message(msg, id)
		}
	}
	// A handler may have set headers or a body before failing: start over.
	c.Response().ResetBody()
	return c.Status(code).JSON(api.Error(code, msg))
}

// errorHandler is the app-level fiber error handler: it sees the errors no
// route handled (oversized bodies, malformed requests, unknown paths).
func errorHandler(bodyLimit int) fiber.ErrorHandler {
	return func(c *fiber.Ctx, err error) error {
		return writeError(c, err, bodyLimit, nil)
	}
}

// envelopeErrors answers the errors of the API's routes in the envelope,
// whatever the app's own error handler.
func (a *API) envelopeErrors(c *fiber.Ctx) error {
	err := c.Next()
	if err == nil {
		return nil
	}
	return writeError(c, err, a.cfg.BodyLimit, a.log)
}

// decodeBody decodes the request's JSON body into v, refusing unknown
// fields, trailing data, an empty body and a body that is not valid UTF-8. Only application/json bodies are
// accepted: a browser sends anything else (form and text/plain types, or no
// Content-Type at all for a Blob without type) cross-site without a CORS
// preflight, so a web page cannot drive the localhost TCP API.
func decodeBody(c *fiber.Ctx, v any) error {
	ct := strings.ToLower(strings.TrimSpace(strings.Split(c.Get(fiber.HeaderContentType), ";")[0]))
	body := c.Body()
	if ct != fiber.MIMEApplicationJSON && (ct != "" || len(body) > 0) {
		return fiber.NewError(http.StatusUnsupportedMediaType,
			fmt.Sprintf("content type %q is not accepted: send application/json", ct))
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("invalid request body: empty, a JSON object is required")
	}
	// encoding/json would turn bytes that are not UTF-8 (and lone
	// surrogate escapes) into U+FFFD: refuse them instead of storing
	// something else than was sent.
	if err := utf8check.Body(body); err != nil {
		return badRequest("%v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return badRequest("invalid request body: unexpected end of JSON input")
		}
		return badRequest("invalid request body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("invalid request body: unexpected data after the JSON object")
	}
	return nil
}
