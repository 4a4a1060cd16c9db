package devlxd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"unicode"
	"unicode/utf8"

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
	var req devlxdapi.StatePut
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&req); err != nil {
		return instance.Declaration{}, fmt.Errorf("Invalid request body: %w", err) //nolint:staticcheck // LXD's wire message.
	}
	switch req.State {
	case devlxdapi.StateReady, devlxdapi.StateStarted, devlxdapi.StateDegraded:
	default:
		return instance.Declaration{}, fmt.Errorf("Invalid state %q", req.State) //nolint:staticcheck // LXD's wire message.
	}
	if err := checkReason(req.Reason); err != nil {
		return instance.Declaration{}, err
	}
	if err := checkMessage(req.Message); err != nil {
		return instance.Declaration{}, err
	}
	return instance.Declaration{State: req.State, Reason: req.Reason, Message: req.Message}, nil
}

// checkReason accepts "" or a CamelCase word: a letter, then letters and
// digits, at most devlxdapi.MaxReasonLen bytes.
func checkReason(r string) error {
	if r == "" {
		return nil
	}
	if len(r) > devlxdapi.MaxReasonLen {
		return fmt.Errorf("Invalid reason: longer than %d bytes", devlxdapi.MaxReasonLen) //nolint:staticcheck // LXD-style wire message.
	}
	for i, c := range r {
		if c > unicode.MaxASCII || !(unicode.IsLetter(c) || (i > 0 && unicode.IsDigit(c))) {
			return fmt.Errorf("Invalid reason %q: must be a CamelCase word (ASCII letters, then letters and digits)", r) //nolint:staticcheck // LXD-style wire message.
		}
	}
	return nil
}

// checkMessage accepts at most devlxdapi.MaxMessageLen bytes of UTF-8
// without control characters other than tab and newline.
func checkMessage(m string) error {
	if len(m) > devlxdapi.MaxMessageLen {
		return fmt.Errorf("Invalid message: longer than %d bytes", devlxdapi.MaxMessageLen) //nolint:staticcheck // LXD-style wire message.
	}
	if !utf8.ValidString(m) {
		return fmt.Errorf("Invalid message: not UTF-8") //nolint:staticcheck // LXD-style wire message.
	}
	for _, c := range m {
		if unicode.IsControl(c) && c != '\t' && c != '\n' {
			return fmt.Errorf("Invalid message: control character %U", c) //nolint:staticcheck // LXD-style wire message.
		}
	}
	return nil
}
