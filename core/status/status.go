// Package status holds LXD's status codes and names, and derives an
// instance's status from its power state, Ready flag and running operation.
package status

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/guestlink/guestlink/errdefs"
)

// Code is an LXD status code (docs/spec/status.md).
type Code int

// Status codes, as LXD's API numbers them.
const (
	OperationCreated Code = 100
	Started          Code = 101
	Stopped          Code = 102
	Running          Code = 103
	Cancelling       Code = 104
	Pending          Code = 105
	Starting         Code = 106
	Stopping         Code = 107
	Aborting         Code = 108
	Freezing         Code = 109
	Frozen           Code = 110
	Thawed           Code = 111
	Error            Code = 112
	Ready            Code = 113
	Success          Code = 200
	Failure          Code = 400
	Cancelled        Code = 401
)

// names maps every known code to its LXD name (case-sensitive).
var names = map[Code]string{
	OperationCreated: "Operation created",
	Started:          "Started",
	Stopped:          "Stopped",
	Running:          "Running",
	Cancelling:       "Cancelling",
	Pending:          "Pending",
	Starting:         "Starting",
	Stopping:         "Stopping",
	Aborting:         "Aborting",
	Freezing:         "Freezing",
	Frozen:           "Frozen",
	Thawed:           "Thawed",
	Error:            "Error",
	Ready:            "Ready",
	Success:          "Success",
	Failure:          "Failure",
	Cancelled:        "Cancelled",
}

// String returns the code's LXD name, such as "Ready", or "Unknown(n)" for a
// code LXD does not define.
func (c Code) String() string {
	if n, ok := names[c]; ok {
		return n
	}
	return fmt.Sprintf("Unknown(%d)", int(c))
}

// Valid reports whether c is one of the codes LXD defines.
func (c Code) Valid() bool {
	_, ok := names[c]
	return ok
}

// Power states of an instance as stored (record.Instance.PowerState): the last
// known state of its guest according to its backend.
const (
	PowerStopped = "stopped"
	PowerRunning = "running"
	PowerError   = "error"
)

// Transitional operations that override the status while they run.
const (
	OpNone     = ""
	OpStarting = "starting"
	OpStopping = "stopping"
)

// Derive returns an instance's status from its stored power state, its Ready
// flag (volatile.last_state.ready is "true") and the transitional operation
// in progress, per the table in docs/architecture.md: a running operation
// wins, then running+ready is Ready, running is Running, stopped (or no
// state yet) is Stopped and anything else is Error.
func Derive(powerState string, ready bool, op string) Code {
	switch op {
	case OpStarting:
		return Starting
	case OpStopping:
		return Stopping
	}
	switch powerState {
	case PowerRunning:
		if ready {
			return Ready
		}
		return Running
	case PowerStopped, "":
		return Stopped
	}
	return Error
}

// IsRunning reports whether code means the instance runs: Running and
// Ready both do, so a "running instances" filter includes Ready ones.
func IsRunning(code Code) bool {
	return code == Running || code == Ready
}

// Parse returns the code named name. The exact LXD name is expected, but the
// match ignores case ("running" is Running) since names are unique without
// it; a decimal code ("113") is accepted as well. Anything else is
// errdefs.ErrInvalid.
func Parse(name string) (Code, error) {
	for c, n := range names {
		if n == name {
			return c, nil
		}
	}
	for c, n := range names {
		if strings.EqualFold(n, name) {
			return c, nil
		}
	}
	if n, err := strconv.Atoi(name); err == nil && strconv.Itoa(n) == name && Code(n).Valid() {
		return Code(n), nil
	}
	return 0, fmt.Errorf("parsing status %q: unknown status name: %w", name, errdefs.ErrInvalid)
}
