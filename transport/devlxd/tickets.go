package devlxd

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultTicketRotation is how often the session ticket key changes when
// Config.TicketRotation is zero. A ticket resumes while its key is the
// current or the previous one: for at most two periods.
const DefaultTicketRotation = time.Hour

// ticketBindingPrefix starts the additional data a session ticket is sealed
// with to name the instance whose link it was issued on.
const ticketBindingPrefix = "guestlink-devlxd-instance:"

// linkCurves are the key exchanges offered on guest links: X25519 alone.
// A link never leaves the host (hybrid and serial are Unix sockets of the
// VMM, vsock is the host's own transport), so the recorded-now, broken-later
// attacker that X25519MLKEM768 defends against would have to record the
// host's own sockets, and then holds the host (docs/security.md). X25519
// costs a fraction of the hybrid's CPU per handshake, and a resumed session
// still runs one key exchange.
var linkCurves = []tls.CurveID{tls.X25519}

// ticketKeys seals and opens the TLS session tickets of a server: the
// newest key seals, the newest and the previous one open. Each key is an
// AES-256-GCM AEAD made once when it becomes current (Go's own ticket
// encryption makes an AES-CTR cipher and an HMAC per ticket, on every
// resumed connection since each is issued a new ticket), and a ticket is
// sealed with the instance of the link that issued it as additional data:
// on another instance's link it does not open.
//
// The keys are random. With a file (Config.TicketKeysFile, in the state
// directory, mode 0600) they are kept across restarts with the time each
// became current, so that the agents' tickets resume on the restarted
// daemon (a re-advertisement without a full handshake): a key seals for one
// period after it became current and opens for two, whether the daemon
// restarted meanwhile or not, and a file group or others may read is not
// used (keysFile). Without a file they live in memory only and a restarted
// daemon resumes no ticket of the previous one.
type ticketKeys struct {
	set atomic.Pointer[ticketKeySet]
	mu  sync.Mutex // serializes rotate
	// file keeps the keys across restarts ("" keeps them in memory only).
	file string
	// period is the rotation period; zero leaves expiry to rotate alone.
	period time.Duration
	now    func() time.Time
	// opened counts the tickets opened: the sessions resumed.
	opened atomic.Int64
}

// ticketKey is one session ticket key.
type ticketKey struct {
	aead    cipher.AEAD
	raw     []byte    // the 32-byte AES-256 key, for the file
	created time.Time // when it became current
}

// ticketKeySet is the current key and the previous one (nil before the
// first rotation).
type ticketKeySet struct {
	cur, prev *ticketKey
}

// newTicketKey makes the AEAD of a 32-byte key that became current at
// created.
func newTicketKey(raw []byte, created time.Time) (*ticketKey, error) {
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, fmt.Errorf("devlxd: session ticket key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("devlxd: session ticket key: %w", err)
	}
	return &ticketKey{aead: aead, raw: raw, created: created}, nil
}

// clock returns the time of k's clock.
func (k *ticketKeys) clock() time.Time {
	if k.now == nil {
		return time.Now()
	}
	return k.now()
}

// rotate makes a fresh key current and keeps the previous one, and writes
// both to the keys' file if there is one.
func (k *ticketKeys) rotate() error {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return fmt.Errorf("devlxd: new session ticket key: %w", err)
	}
	key, err := newTicketKey(raw, k.clock())
	if err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	next := &ticketKeySet{cur: key}
	if old := k.set.Load(); old != nil {
		next.prev = old.cur
	}
	k.set.Store(next)
	if k.file == "" {
		return nil
	}
	return writeKeysFile(k.file, next)
}

// restore makes the keys of k's file that are still usable at now current
// and previous, and reports when the current one is to be rotated out. It
// rotates at once when the file holds no key that may still seal (none, all
// expired, or a file that cannot be used: that error is returned beside a
// fresh key, so the caller may log it and go on).
func (k *ticketKeys) restore() (next time.Time, fileErr error) {
	now := k.clock()
	keys, fileErr := readKeysFile(k.file, now, k.period)
	if len(keys) > 0 && now.Before(keys[0].created.Add(k.period)) {
		set := &ticketKeySet{cur: keys[0]}
		if len(keys) > 1 {
			set.prev = keys[1]
		}
		k.set.Store(set)
		return keys[0].created.Add(k.period), fileErr
	}
	if len(keys) > 0 {
		// The newest key may still open, no longer seal: it becomes the
		// previous one of a fresh key.
		k.set.Store(&ticketKeySet{cur: keys[0]})
	}
	if err := k.rotate(); err != nil {
		return time.Time{}, errors.Join(fileErr, err)
	}
	return now.Add(k.period), fileErr
}

// usable reports whether key may open a ticket at now: for two periods
// after it became current (never when it claims to be from the future).
func (k *ticketKeys) usable(key *ticketKey, now time.Time) bool {
	if key == nil {
		return false
	}
	if k.period <= 0 {
		return true
	}
	return !key.created.After(now) && now.Before(key.created.Add(2*k.period))
}

// seal encrypts a session state for the link of binding: a random nonce,
// then the sealed state.
func (k *ticketKeys) seal(state, binding []byte) ([]byte, error) {
	aead := k.set.Load().cur.aead
	ns := aead.NonceSize()
	out := make([]byte, ns, ns+len(state)+aead.Overhead())
	if _, err := rand.Read(out); err != nil {
		return nil, fmt.Errorf("devlxd: session ticket nonce: %w", err)
	}
	return aead.Seal(out, out[:ns], state, binding), nil
}

// open returns the session state a ticket sealed for binding holds, or nil
// when no current key opens it (another link's ticket, a key rotated out
// or expired, a ticket of another daemon, or garbage).
func (k *ticketKeys) open(ticket, binding []byte) []byte {
	set := k.set.Load()
	now := k.clock()
	for _, key := range []*ticketKey{set.cur, set.prev} {
		if !k.usable(key, now) {
			continue
		}
		aead := key.aead
		if len(ticket) < aead.NonceSize()+aead.Overhead() {
			continue
		}
		ns := aead.NonceSize()
		if state, err := aead.Open(nil, ticket[:ns], ticket[ns:], binding); err == nil {
			k.opened.Add(1)
			return state
		}
	}
	return nil
}

// rotateTickets rotates the ticket keys at first, then every period until
// done is closed.
func (s *Server) rotateTickets(first time.Time, period time.Duration, done <-chan struct{}) {
	t := time.NewTimer(max(0, first.Sub(s.tickets.clock())))
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if err := s.tickets.rotate(); err != nil {
				s.cfg.Logger.Error("devlxd: rotating session ticket keys", "err", err)
			}
			t.Reset(period)
		}
	}
}

// tlsFor returns the TLS configuration of a connection accepted on the link
// of the instance uuid: the server's, with session tickets bound to that
// instance (ticketKeys). A ticket issued on one instance's link does not
// resume on another's (that connection gets a full handshake instead), so a
// guest cannot take over another guest's session even with its ticket; and
// the identity check of every request (authenticate: the link's instance,
// the client certificate the session carries, its validity now) runs on
// resumed sessions as on new ones.
func (s *Server) tlsFor(uuid string) *tls.Config {
	conf := s.tls.Clone()
	binding := []byte(ticketBindingPrefix + uuid)
	conf.WrapSession = func(_ tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
		state, err := ss.Bytes()
		if err != nil {
			return nil, fmt.Errorf("devlxd: encoding a session ticket: %w", err)
		}
		return s.tickets.seal(state, binding)
	}
	conf.UnwrapSession = func(identity []byte, _ tls.ConnectionState) (*tls.SessionState, error) {
		state := s.tickets.open(identity, binding)
		if state == nil {
			return nil, nil // another instance's ticket, or a stale one: a full handshake
		}
		ss, err := tls.ParseSessionState(state)
		if err != nil {
			return nil, nil //nolint:nilerr // as Go's DecryptTicket: a bad ticket is a full handshake
		}
		return ss, nil
	}
	return conf
}
