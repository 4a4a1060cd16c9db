package auth

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/guestlink/guestlink/errdefs"
)

// ShortIDLen is how many hex digits of a session's id hash name it
// ("session/<short id>") and are enough to revoke it.
const ShortIDLen = 8

// Session is a dashboard session as listed: its id is the SHA-256 of the
// secret session id, never the secret. The admin API answers it as
// api.Session.
type Session struct {
	ID        string // SHA-256 of the session id, hex
	Name      string // "session/<first 8 digits of ID>"
	CreatedAt time.Time
	ExpiresAt time.Time
	CreatedBy string // who asked for the login URL
}

// SessionName returns "session/<first ShortIDLen digits of hash>".
func SessionName(hash string) string {
	if len(hash) > ShortIDLen {
		hash = hash[:ShortIDLen]
	}
	return "session/" + hash
}

// NewLogin makes a one-time dashboard login token, valid for LoginTTL.
// At most MaxLoginTokens are live at once: more is errdefs.ErrConflict.
// by says who asked (it is recorded on the session).
func (s *Service) NewLogin(ctx context.Context, by string) (string, time.Time, error) {
	token, err := newSecret(PrefixLogin)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("making login token: %w", err)
	}
	now := s.now()
	rec := &LoginToken{Hash: Hash(token), CreatedAt: now, ExpiresAt: now.Add(s.cfg.LoginTTL), CreatedBy: by}
	if err := s.store.CreateLoginToken(ctx, rec, now, s.cfg.MaxLoginTokens); err != nil {
		return "", time.Time{}, err
	}
	return token, rec.ExpiresAt, nil
}

// Redeem exchanges a one-time login token for a new dashboard session.
func (s *Service) Redeem(ctx context.Context, loginToken string) (sessionID string, expires time.Time, err error) {
	if !wellFormed(loginToken, PrefixLogin) {
		return "", time.Time{}, unauthorized("invalid login token")
	}
	id, err := newSecret(PrefixSession)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("making session: %w", err)
	}
	now := s.now()
	rec := &SessionRecord{Hash: Hash(id), CreatedAt: now, ExpiresAt: now.Add(s.cfg.SessionTTL)}
	if err := s.store.RedeemLoginToken(ctx, Hash(loginToken), now, rec); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return "", time.Time{}, unauthorized("invalid login token (unknown, used or expired)")
		}
		return "", time.Time{}, err
	}
	s.log.Info("dashboard session started", "session", SessionName(rec.Hash), "login_by", rec.CreatedBy)
	return id, rec.ExpiresAt, nil
}

// Validate returns who the session is ("session/<first 8 chars of its id hash>") or an error.
func (s *Service) Validate(ctx context.Context, sessionID string) (who string, err error) {
	if !wellFormed(sessionID, PrefixSession) {
		return "", unauthorized("invalid session")
	}
	h := Hash(sessionID)
	rec, err := s.store.SessionByHash(ctx, h)
	if errors.Is(err, errdefs.ErrNotFound) {
		return "", unauthorized("invalid session (unknown or revoked)")
	}
	if err != nil {
		return "", fmt.Errorf("checking session: %w", err)
	}
	if !sameHash(rec.Hash, h) {
		return "", unauthorized("invalid session (unknown or revoked)")
	}
	if !s.cfg.Now().Before(rec.ExpiresAt) {
		return "", unauthorized("session %s expired", SessionName(h))
	}
	return SessionName(h), nil
}

// Revoke ends a session.
func (s *Service) Revoke(ctx context.Context, sessionID string) error {
	if !wellFormed(sessionID, PrefixSession) {
		return unauthorized("invalid session")
	}
	n, err := s.store.DeleteSessions(ctx, Hash(sessionID), true)
	if err != nil {
		return err
	}
	if n == 0 {
		return unauthorized("invalid session (unknown or revoked)")
	}
	return nil
}

// Sessions lists the live dashboard sessions.
func (s *Service) Sessions(ctx context.Context) ([]Session, error) {
	list, err := s.store.Sessions(ctx, s.now())
	if err != nil {
		return nil, err
	}
	out := make([]Session, 0, len(list))
	for _, x := range list {
		out = append(out, Session{ID: x.Hash, Name: SessionName(x.Hash), CreatedAt: x.CreatedAt, ExpiresAt: x.ExpiresAt, CreatedBy: x.CreatedBy})
	}
	return out, nil
}

// RevokeSession ends the session whose listed id (the hash, or at least
// its first ShortIDLen digits, optionally as "session/<digits>") is id.
// errdefs.ErrNotFound if none matches, errdefs.ErrConflict if the prefix
// matches several (nothing is revoked then).
func (s *Service) RevokeSession(ctx context.Context, id string) error {
	if len(id) > len("session/") && id[:len("session/")] == "session/" {
		id = id[len("session/"):]
	}
	matches := 0
	list, err := s.store.Sessions(ctx, time.Time{})
	if err != nil {
		return err
	}
	if len(id) < ShortIDLen {
		return fmt.Errorf("invalid session id %q: give at least %d hex digits: %w", id, ShortIDLen, errdefs.ErrInvalid)
	}
	for _, x := range list {
		if len(x.Hash) >= len(id) && x.Hash[:len(id)] == id {
			matches++
		}
	}
	switch {
	case matches == 0:
		return fmt.Errorf("session %q: %w", id, errdefs.ErrNotFound)
	case matches > 1:
		return fmt.Errorf("session id %q matches %d sessions: give more digits: %w", id, matches, errdefs.ErrConflict)
	}
	if _, err := s.store.DeleteSessions(ctx, id, false); err != nil {
		return err
	}
	s.log.Info("dashboard session revoked", "session", SessionName(id))
	return nil
}
