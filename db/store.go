package db

import (
	"context"
	"time"

	"github.com/guestlink/guestlink/errdefs"
)

// Errors the Store returns (wrapped). They are the daemon's error kinds, so
// the API edges map store errors without translating them.
var (
	ErrNotFound      = errdefs.ErrNotFound
	ErrAlreadyExists = errdefs.ErrAlreadyExists
	ErrInvalid       = errdefs.ErrInvalid // bad argument (nil instance, no name, ...)
)

// InstanceFilter narrows ListInstances. Zero values match everything.
type InstanceFilter struct {
	Backend    string
	PowerState string
	Location   string // the cluster member that runs the instance
}

// Store is the daemon's persistent state. All methods are safe for
// concurrent use; every method that returns nil has made its change durable.
type Store interface {
	CreateInstance(ctx context.Context, in *Instance) error // sets ID; ErrAlreadyExists on a duplicate name
	GetInstance(ctx context.Context, name string) (*Instance, error)
	GetInstanceByUUID(ctx context.Context, uuid string) (*Instance, error)
	ListInstances(ctx context.Context, f InstanceFilter) ([]*Instance, error)
	// UpdateInstance saves all fields of in (matched by ID) but its
	// profiles (ProfileStore.SetInstanceProfiles).
	UpdateInstance(ctx context.Context, in *Instance) error
	// UpdateInstanceWithTimeline saves in and appends entries in one transaction.
	UpdateInstanceWithTimeline(ctx context.Context, in *Instance, entries ...*TimelineEntry) error
	DeleteInstance(ctx context.Context, id int64) error // also its timeline
	AppendTimeline(ctx context.Context, entries ...*TimelineEntry) error
	ListTimeline(ctx context.Context, instanceID int64, limit int) ([]*TimelineEntry, error) // oldest first, last `limit` entries
	// LastBecameReady returns the time of the newest timeline entry of boot
	// of the instance that records Ready going from "false" to "true"
	// (kind "ready"); ok is false when there is none.
	LastBecameReady(ctx context.Context, instanceID, boot int64) (at time.Time, ok bool, err error)
	// ClearReadyAll removes volatile.last_state.ready from every instance
	// (daemon start) and returns how many instances changed.
	ClearReadyAll(ctx context.Context) (int, error)
	// ClearReadyAt is ClearReadyAll for the instances of one cluster
	// member (location); "" means every instance.
	ClearReadyAt(ctx context.Context, location string) (int, error)
	AppendEvent(ctx context.Context, ev *Event) error // sets ev.ID
	// EventsAfter returns up to limit events with ID > after, oldest first.
	EventsAfter(ctx context.Context, after int64, limit int) ([]*Event, error)
	LastEventID(ctx context.Context) (int64, error)
	Close() error
}
