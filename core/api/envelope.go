package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	wire "github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/api/utf8check"
	"github.com/guestlink/guestlink/errdefs"
)

// sync200 answers 200 with the sync envelope around metadata.
func sync200(c *fiber.Ctx, metadata any) error {
	return c.Status(http.StatusOK).JSON(wire.Sync(metadata))
}

// syncCreated answers 201 with the sync envelope around metadata.
func syncCreated(c *fiber.Ctx, metadata any) error {
	return c.Status(http.StatusCreated).JSON(wire.Sync(metadata))
}

// badRequest returns a 400 error with a formatted message.
func badRequest(format string, args ...any) error {
	return fiber.NewError(http.StatusBadRequest, fmt.Sprintf(format, args...))
}

// writeError answers err in the error envelope: fiber errors keep their
// code, service errors are mapped through their errdefs kind.
func writeError(c *fiber.Ctx, err error, bodyLimit int) error {
	code, msg := errdefs.HTTPStatus(err), err.Error()
	var fe *fiber.Error
	if errors.As(err, &fe) {
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
	// A handler may have set headers or a body before failing: start over.
	c.Response().ResetBody()
	return c.Status(code).JSON(wire.Error(code, msg))
}

// errorHandler is the app-level fiber error handler: it sees the errors no
// route handled (oversized bodies, malformed requests, unknown paths).
func errorHandler(bodyLimit int) fiber.ErrorHandler {
	return func(c *fiber.Ctx, err error) error {
		return writeError(c, err, bodyLimit)
	}
}

// envelopeErrors answers the errors of the API's routes in the envelope,
// whatever the app's own error handler.
func (a *API) envelopeErrors(c *fiber.Ctx) error {
	err := c.Next()
	if err == nil {
		return nil
	}
	if errdefs.HTTPStatus(err) == http.StatusInternalServerError {
		var fe *fiber.Error
		if !errors.As(err, &fe) {
			a.log.Error("admin API request failed", "method", c.Method(), "path", c.Path(), "err", err)
		}
	}
	return writeError(c, err, a.cfg.BodyLimit)
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
