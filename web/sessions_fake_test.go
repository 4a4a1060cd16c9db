package web

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/guestlink/guestlink/errdefs"
)

// fakeSessions is an in-memory Sessions with the contract of
// core/auth.Service: one-time login tokens, sessions with an expiry,
// ErrUnauthorized for anything unknown, used, expired or revoked.
type fakeSessions struct {
	mu       sync.Mutex
	tokens   map[string]bool      // unused login tokens
	sessions map[string]time.Time // session id -> expiry
	n        int
	ttl      time.Duration
	broken   error // when set, every call fails with it (the store is down)

	validations atomic.Int64
}

var _ Sessions = (*fakeSessions)(nil)

func newFakeSessions() *fakeSessions {
	return &fakeSessions{tokens: map[string]bool{}, sessions: map[string]time.Time{}, ttl: time.Hour}
}

// issue returns a new one-time login token.
func (f *fakeSessions) issue() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	tok := fmt.Sprintf("login-%d-%s", f.n, randomToken()[:16])
	f.tokens[tok] = true
	return tok
}

func (f *fakeSessions) Redeem(_ context.Context, token string) (string, time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.broken != nil {
		return "", time.Time{}, fmt.Errorf("redeeming a login token: %w", f.broken)
	}
	if !f.tokens[token] {
		return "", time.Time{}, fmt.Errorf("login token unknown, used or expired: %w", errdefs.ErrUnauthorized)
	}
	delete(f.tokens, token)
	sid := randomToken()
	exp := time.Now().Add(f.ttl).Truncate(time.Second)
	f.sessions[sid] = exp
	return sid, exp, nil
}

func (f *fakeSessions) Validate(_ context.Context, sid string) (string, error) {
	f.validations.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.broken != nil {
		return "", fmt.Errorf("validating a session: %w", f.broken)
	}
	exp, ok := f.sessions[sid]
	if !ok || time.Now().After(exp) {
		return "", fmt.Errorf("session unknown, revoked or expired: %w", errdefs.ErrUnauthorized)
	}
	return "session/" + sid[:8], nil
}

func (f *fakeSessions) Revoke(_ context.Context, sid string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.sessions[sid]; !ok {
		return fmt.Errorf("session unknown: %w", errdefs.ErrUnauthorized)
	}
	delete(f.sessions, sid)
	return nil
}

// live returns how many sessions exist.
func (f *fakeSessions) live() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sessions)
}

// expire makes a session expired.
func (f *fakeSessions) expire(sid string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sessions[sid] = time.Now().Add(-time.Second)
}

var errStoreDown = errors.New("database is locked")
