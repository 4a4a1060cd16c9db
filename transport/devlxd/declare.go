package devlxd

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/guestlink/guestlink/api/utf8check"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/link/devlxdapi"
)

// Declarer is the optional part of Instances that records a guest's
// declaration with its reason (core/instance.Manager implements it);
// without it, PATCH /1.0 sets the Ready flag only.
type Declarer interface {
	Declare(ctx context.Context, uuid string, d instance.Declaration, by events.Requestor) error
}

// DecodeDeclaration decodes a PATCH /1.0 body as LXD does (the first JSON
// value; unknown fields ignored) with guestlink's extensions: state
// Degraded, and the optional reason and message. Its errors are the exact
// messages answered with 400; a body LXD accepts gets LXD's. A body that
// is not valid UTF-8 is refused (LXD would store U+FFFD instead).
func DecodeDeclaration(body []byte) (instance.Declaration, error) {
	if err := utf8check.Body(body); err != nil {
		return instance.Declaration{}, err
	}
	// Decoded as LXD's type of the same name, so that a field of the wrong
	// type is named as LXD's decoder names it.
	type DevLXDPut devlxdapi.StatePut
	var req DevLXDPut
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&req); err != nil {
		return instance.Declaration{}, &BodyError{Err: err}
	}
	put := devlxdapi.StatePut(req)
	if err := put.Check(); err != nil {
		return instance.Declaration{}, err
	}
	return instance.Declaration{State: req.State, Reason: req.Reason, Message: req.Message}, nil
}

// BodyError is DecodeDeclaration's error for a body that is not JSON: LXD
// answers it 400 "Invalid request body: <Err>", LXD's VM agent 500 with
// Err's text alone.
type BodyError struct {
	// Err is the JSON decoder's error.
	Err error
}

func (e *BodyError) Error() string { return "Invalid request body: " + e.Err.Error() }

func (e *BodyError) Unwrap() error { return e.Err }
