package devlxd

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/tls"
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
// on another instance's link it does not open. The keys are random and live
// in memory only, so a restarted daemon resumes no ticket of the previous
// one.
type ticketKeys struct {
	set atomic.Pointer[ticketKeySet]
	mu  sync.Mutex // serializes rotate
}

// ticketKeySet is the current key and the previous one (nil before the
// first rotation).
type ticketKeySet struct {
	cur, prev cipher.AEAD
}

// rotate makes a fresh key current and keeps the previous one.
func (k *ticketKeys) rotate() error {
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return fmt.Errorf("devlxd: new session ticket key: %w", err)
	}
	block, err := aes.NewCipher(key[:])
	if err != nil {
		return fmt.Errorf("devlxd: new session ticket key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return fmt.Errorf("devlxd: new session ticket key: %w", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	next := &ticketKeySet{cur: aead}
	if old := k.set.Load(); old != nil {
		next.prev = old.cur
	}
	k.set.Store(next)
	return nil
}

// seal encrypts a session state for the link of binding: a random nonce,
// then the sealed state.
func (k *ticketKeys) seal(state, binding []byte) ([]byte, error) {
	aead := k.set.Load().cur
	ns := aead.NonceSize()
	out := make([]byte, ns, ns+len(state)+aead.Overhead())
	if _, err := rand.Read(out); err != nil {
		return nil, fmt.Errorf("devlxd: session ticket nonce: %w", err)
	}
	return aead.Seal(out, out[:ns], state, binding), nil
}

// open returns the session state a ticket sealed for binding holds, or nil
// when no current key opens it (another link's ticket, a key rotated out,
// a ticket of another daemon, or garbage).
func (k *ticketKeys) open(ticket, binding []byte) []byte {
	set := k.set.Load()
	for _, aead := range []cipher.AEAD{set.cur, set.prev} {
		if aead == nil || len(ticket) < aead.NonceSize()+aead.Overhead() {
			continue
		}
		ns := aead.NonceSize()
		if state, err := aead.Open(nil, ticket[:ns], ticket[ns:], binding); err == nil {
			return state
		}
	}
	return nil
}

// rotateTickets rotates the ticket keys every period until done is closed.
func (s *Server) rotateTickets(period time.Duration, done <-chan struct{}) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if err := s.tickets.rotate(); err != nil {
				s.cfg.Logger.Error("devlxd: rotating session ticket keys", "err", err)
			}
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
