// Package errdefs defines the few error kinds the daemon's services return.
// Services wrap them with context (fmt.Errorf("starting instance %q: %w", ...));
// only the API edges map them to HTTP statuses. Never match error strings.
package errdefs

import (
	"errors"
	"net/http"
)

// Error kinds.
var (
	ErrNotFound      = errors.New("not found")
	ErrAlreadyExists = errors.New("already exists")
	ErrInvalid       = errors.New("invalid argument")
	ErrConflict      = errors.New("conflict") // wrong state for the operation
	ErrForbidden     = errors.New("forbidden")
	ErrUnauthorized  = errors.New("unauthorized")
	ErrNotSupported  = errors.New("not supported")
	ErrUnavailable   = errors.New("unavailable") // a plugin or guest is gone
	// ErrNoSpace: the host's disk would fill (HTTP 507 Insufficient Storage).
	ErrNoSpace = errors.New("insufficient storage")
	// ErrClosed: the store (or another part) was closed because the daemon
	// stops; a retry cannot succeed (HTTP 500, as any unmapped error).
	ErrClosed = errors.New("closed")
)

// HTTPStatus maps an error to the HTTP status the API answers with.
func HTTPStatus(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrAlreadyExists):
		return http.StatusConflict
	case errors.Is(err, ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, ErrConflict):
		return http.StatusConflict
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, ErrUnauthorized):
		return http.StatusUnauthorized
	case errors.Is(err, ErrNotSupported):
		return http.StatusNotImplemented
	case errors.Is(err, ErrUnavailable):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrNoSpace):
		return http.StatusInsufficientStorage
	}
	return http.StatusInternalServerError
}

// FromHTTPStatus returns the kind an HTTP error status stands for (the
// inverse of HTTPStatus); a status without a kind gives an error naming it.
func FromHTTPStatus(code int) error {
	switch code {
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusConflict:
		return ErrConflict
	case http.StatusBadRequest:
		return ErrInvalid
	case http.StatusForbidden:
		return ErrForbidden
	case http.StatusUnauthorized:
		return ErrUnauthorized
	case http.StatusNotImplemented:
		return ErrNotSupported
	case http.StatusServiceUnavailable:
		return ErrUnavailable
	case http.StatusInsufficientStorage:
		return ErrNoSpace
	}
	return errors.New(http.StatusText(code))
}
