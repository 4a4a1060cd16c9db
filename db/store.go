package db

import (
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/errdefs"
)

// Errors the Store returns (wrapped). They are the daemon's error kinds, so
// the API edges map store errors without translating them.
var (
	ErrNotFound      = errdefs.ErrNotFound
	ErrAlreadyExists = errdefs.ErrAlreadyExists
	ErrInvalid       = errdefs.ErrInvalid // bad argument (nil instance, no name, ...)
)

// Store is the daemon's persistent state: the instances (record.Store), the
// event log (events.EventStore) and Close. All methods are safe for
// concurrent use; every method that returns nil has made its change
// durable. The Store Open returns also implements record.ProfileStore,
// record.SnapshotStore and the stores of the other services.
type Store interface {
	record.Store
	events.EventStore
	// CloseWrites ends the writes when a stop begins: the transaction in
	// flight commits, every write that had not started (queued, or
	// waiting to be) and every later one fails with ErrClosed; reads go
	// on until Close.
	CloseWrites()
	Close() error
}
