package agentmon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/link/advert"
	"github.com/guestlink/guestlink/link/devlxdapi"
)

// Declarer is an optional interface of Instances (*instance.Manager
// implements it): Declare records a guest's declared state. With it the
// advertisements ask the agents to hand back their guest's last
// declaration in their answer (advert.DeclarationHeader), and the monitor
// records it once the advertisement's slot is free, instead of the agent
// re-sending it with PATCH /1.0 while the slot waits: after a daemon
// restart of 10,000 ready guests that PATCH was a full TLS handshake each
// and held one of MaxAdvertising slots until its store write committed.
type Declarer interface {
	Declare(ctx context.Context, uuid string, d instance.Declaration, by events.Requestor) error
}

// asksDeclaration reports whether an advertisement to inst's agent asks
// for the guest's declaration in the answer: when the daemon records
// declarations itself and has none of this boot (the Ready flag unset: the
// daemon started since, or its record of the handed-back one failed). It
// asks again at every advertisement until one is recorded, and never once
// the guest's state is known, so a declaration is neither lost nor
// recorded twice (each record of a Ready is an instance-ready event).
func asksDeclaration(insts Instances, inst *instance.Instance) bool {
	_, ok := insts.(Declarer)
	return ok && inst.Config[instance.KeyReady] == ""
}

// declarationInAnswer is the header of an advertisement to an agent when
// the daemon records declarations itself.
var declarationInAnswer = map[string]string{advert.DeclarationHeader: "1"}

// parseAnswer reads the declaration an agent handed back in its answer to
// PUT /1.0: nil when there is none (null metadata, an agent that predates
// advert.DeclarationHeader, or a guest that declared nothing this boot).
// The declaration is checked as devlxd checks a PATCH /1.0: an agent's
// answer is the guest's word, no more trusted than its PATCH.
func parseAnswer(body []byte) (*devlxdapi.StatePut, error) {
	var env struct {
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("decoding the agent's answer: %w: %w", errdefs.ErrInvalid, err)
	}
	if len(env.Metadata) == 0 || string(env.Metadata) == "null" {
		return nil, nil
	}
	var a advert.Answer
	if err := json.Unmarshal(env.Metadata, &a); err != nil {
		return nil, fmt.Errorf("decoding the agent's answer: %w: %w", errdefs.ErrInvalid, err)
	}
	if a.Declaration == nil {
		return nil, nil
	}
	if err := a.Declaration.Check(); err != nil {
		return nil, fmt.Errorf("the agent's declaration: %w: %w", errdefs.ErrInvalid, err)
	}
	return a.Declaration, nil
}

// restoreDeclaration records the declaration an agent handed back. It
// returns an error when the record failed and is worth another try (the
// advertisement then counts as failed, so the monitor advertises again and
// asks again: asksDeclaration); not for a guest that stopped meanwhile or
// a daemon that stops.
func (m *monitor) restoreDeclaration(d *devlxdapi.StatePut) error {
	cfg := &m.svc.cfg
	dc, ok := cfg.Instances.(Declarer)
	if !ok || d == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(m.ctx, cfg.RequestTimeout)
	defer cancel()
	err := dc.Declare(ctx, m.uuid, instance.Declaration{State: d.State, Reason: d.Reason, Message: d.Message, Restore: true},
		events.Requestor{Protocol: "agent", Address: "advertisement"})
	switch {
	case err == nil:
		cfg.Logger.Debug("agentmon: guest state restored from the agent's answer", "instance", m.name, "state", d.State)
		return nil
	case errors.Is(err, errdefs.ErrConflict), errors.Is(err, errdefs.ErrNotFound), m.ctx.Err() != nil:
		// The guest stopped or the daemon stops meanwhile.
		cfg.Logger.Debug("agentmon: restoring guest state", "instance", m.name, "state", d.State, "err", err)
		return nil
	default:
		cfg.Logger.Warn("agentmon: restoring guest state; advertising again", "instance", m.name, "state", d.State, "err", err)
		return fmt.Errorf("recording the declaration the agent handed back: %w", err)
	}
}
