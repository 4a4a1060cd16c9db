package db

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/guestlink/guestlink/errdefs"
)

// unavailableError is a store failure because the database server cannot
// be reached (it restarts, the connection broke): its message is plain
// (callers answer it to users: 503), the driver's error is kept for logs
// and errors.As.
type unavailableError struct{ cause error }

func (e *unavailableError) Error() string {
	return "database unavailable, reconnecting: try again shortly"
}

// Unwrap gives errdefs.ErrUnavailable (HTTP 503) and the driver's error.
func (e *unavailableError) Unwrap() []error { return []error{errdefs.ErrUnavailable, e.cause} }

// Cause returns the driver's error, for logs.
func (e *unavailableError) Cause() error { return e.cause }

// isUnavailable reports whether err means the server could not be reached
// or went away: connection refused or reset, EOF mid-statement, the server
// shutting down or starting (SQLSTATE 57P01..57P03), connection exceptions
// (class 08), a connection pgx or database/sql gave up on.
func isUnavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	var oe *net.OpError
	switch {
	case errors.As(err, &ce), errors.As(err, &oe), errors.As(err, &ne):
		return true
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	return pgconn.Timeout(err) || strings.Contains(err.Error(), "conn closed")
}

// staleReadAttempts bounds retryRead: after the server ended its
// connections, every idle connection of the reader pool (16 on
// PostgreSQL) may be stale, and a failed read drops only its own.
const staleReadAttempts = 17

// retryRead runs a read and, while it fails because its pooled connection
// was stale (the server ended it, or restarted), again, at most
// staleReadAttempts times in all: the pool drops each broken connection,
// so a later attempt gets a live or a fresh one. A timeout is not retried
// (it would only multiply the wait), nor a server that is down for good
// beyond the attempts (each fails at once: connection refused). Only
// reads are retried: a write that failed may have reached the server.
// Retrying once was not enough: a read right after the server ended two
// idle connections met both (TestPostgresOutage, under CI's -race).
func retryRead(read func() error) error {
	err := read()
	for i := 1; i < staleReadAttempts && isUnavailable(err) && !pgconn.Timeout(err); i++ {
		err = read()
	}
	return err
}
