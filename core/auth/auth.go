// Package auth is the admin API's authentication service: the trust store
// of TLS client certificates, bearer identities and their tokens, and the
// dashboard's one-time login tokens and sessions. It sees no HTTP: the API
// edge hands it certificates and token strings and maps its errors
// (errdefs.ErrUnauthorized for anything that does not authenticate).
//
// Secrets are never stored: bearer tokens, login tokens and session ids are
// random strings of 256 bits whose SHA-256 alone is kept in the store, and
// each is compared in constant time after its lookup.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/guestlink/guestlink/errdefs"
)

// Defaults of Config.
const (
	// DefaultLoginTTL is how long a one-time dashboard login token lives.
	DefaultLoginTTL = 15 * time.Minute
	// DefaultSessionTTL is how long a dashboard session lives.
	DefaultSessionTTL = 24 * time.Hour
	// DefaultMaxLoginTokens bounds the login tokens live at once.
	DefaultMaxLoginTokens = 100
	// DefaultPurgeInterval is how often Run deletes expired login tokens
	// and sessions.
	DefaultPurgeInterval = time.Minute
)

// Prefixes of the secrets the service hands out; they make a leaked secret
// recognisable (for scanners) and say what it is.
const (
	PrefixBearer  = "glb_"
	PrefixLogin   = "gll_"
	PrefixSession = "gls_"
)

// secretBytes is the entropy of every secret: 256 bits.
const secretBytes = 32

// Config configures a Service.
type Config struct {
	// Store keeps the state (required); the daemon's database implements
	// it, and DevlxdStore too.
	Store Store
	// LoginTTL, SessionTTL and MaxLoginTokens default to the constants above.
	LoginTTL       time.Duration
	SessionTTL     time.Duration
	MaxLoginTokens int
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives the service's log lines; nil discards them.
	Logger *slog.Logger
}

// Service is the authentication service. It is safe for concurrent use.
type Service struct {
	cfg   Config
	store Store
	log   *slog.Logger
}

// New returns a service over cfg.Store.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("creating auth service: a store is required: %w", errdefs.ErrInvalid)
	}
	if cfg.LoginTTL <= 0 {
		cfg.LoginTTL = DefaultLoginTTL
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.MaxLoginTokens <= 0 {
		cfg.MaxLoginTokens = DefaultMaxLoginTokens
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg, store: cfg.Store, log: cfg.Logger}, nil
}

// now is the service's clock in UTC, at the store's microsecond precision.
func (s *Service) now() time.Time { return s.cfg.Now().UTC().Truncate(time.Microsecond) }

// newSecret returns prefix + 256 random bits in unpadded base64url.
func newSecret(prefix string) (string, error) {
	b := make([]byte, secretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("reading random bytes: %w", err)
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// Hash returns the hex SHA-256 of a secret, the form the store keeps.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// sameHash reports whether two hex hashes are equal, in constant time.
func sameHash(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// wellFormed reports whether secret has the prefix and length of the
// service's secrets: anything else is refused without a store lookup.
func wellFormed(secret, prefix string) bool {
	return len(secret) == len(prefix)+base64.RawURLEncoding.EncodedLen(secretBytes) && secret[:len(prefix)] == prefix
}

// Run deletes expired login tokens and sessions every interval (default
// DefaultPurgeInterval) until ctx ends.
func (s *Service) Run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultPurgeInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// A purge once started finishes (one short write): ctx ending
			// stops the loop, not a transaction half way.
			if _, err := s.Purge(context.WithoutCancel(ctx)); err != nil {
				s.log.Warn("purging expired logins and sessions", "err", err)
			}
		}
	}
}

// Purge deletes the expired login tokens and sessions now and returns how
// many went.
func (s *Service) Purge(ctx context.Context) (int, error) {
	return s.store.PurgeAuth(ctx, s.now())
}

// unauthorized wraps errdefs.ErrUnauthorized with a message.
func unauthorized(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), errdefs.ErrUnauthorized)
}
