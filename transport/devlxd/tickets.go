package devlxd

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"sync"
	"time"
)

// DefaultTicketRotation is how often the session ticket key changes when
// Config.TicketRotation is zero. A ticket resumes while its key is the
// current or the previous one: for at most two periods.
const DefaultTicketRotation = time.Hour

// ticketBindingPrefix starts the Extra field a session ticket carries to
// name the instance whose link it was issued on.
const ticketBindingPrefix = "guestlink-devlxd-instance:"

// linkCurves are the key exchanges offered on guest links: X25519 alone.
// A link never leaves the host (hybrid and serial are Unix sockets of the
// VMM, vsock is the host's own transport), so the recorded-now, broken-later
// attacker that X25519MLKEM768 defends against would have to record the
// host's own sockets, and then holds the host (docs/security.md). X25519
// costs a fraction of the hybrid's CPU per handshake, and a resumed session
// still runs one key exchange.
var linkCurves = []tls.CurveID{tls.X25519}

// ticketKeys rotates the TLS session ticket keys of a server's base
// configuration: the newest key encrypts, the newest and the previous one
// decrypt. The keys are random and live in memory only, so a restarted
// daemon resumes no ticket of the previous one.
type ticketKeys struct {
	conf *tls.Config
	mu   sync.Mutex
	prev [32]byte
	have bool
}

// rotate makes a fresh key current and keeps the previous one.
func (k *ticketKeys) rotate() error {
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return fmt.Errorf("devlxd: new session ticket key: %w", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	keys := [][32]byte{key}
	if k.have {
		keys = append(keys, k.prev)
	}
	k.conf.SetSessionTicketKeys(keys)
	k.prev, k.have = key, true
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
// instance. A ticket issued on one instance's link does not resume on
// another's (that connection gets a full handshake instead), so a guest
// cannot take over another guest's session even with its ticket; and the
// identity check of every request (authenticate: the link's instance, the
// client certificate the session carries, its validity now) runs on resumed
// sessions as on new ones.
func (s *Server) tlsFor(uuid string) *tls.Config {
	base := s.tls
	conf := base.Clone()
	binding := []byte(ticketBindingPrefix + uuid)
	conf.WrapSession = func(cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
		ss.Extra = append(ss.Extra, binding)
		return base.EncryptTicket(cs, ss)
	}
	conf.UnwrapSession = func(identity []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
		ss, err := base.DecryptTicket(identity, cs)
		if err != nil || ss == nil {
			return nil, err
		}
		for _, e := range ss.Extra {
			if bytes.Equal(e, binding) {
				return ss, nil
			}
		}
		return nil, nil // another instance's ticket: a full handshake
	}
	return conf
}
