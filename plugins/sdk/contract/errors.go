package contract

import "errors"

// Error kinds a plugin returns (wrapped with context through fmt.Errorf and
// %w). They cross the plugin boundary as gRPC status codes and are restored
// on the daemon side, so errors.Is works on both ends.
var (
	ErrNotFound     = errors.New("not found")        // codes.NotFound
	ErrInvalid      = errors.New("invalid argument") // codes.InvalidArgument
	ErrConflict     = errors.New("conflict")         // codes.FailedPrecondition
	ErrNotSupported = errors.New("not supported")    // codes.Unimplemented
	ErrUnavailable  = errors.New("unavailable")      // codes.Unavailable (plugin gone)
)
