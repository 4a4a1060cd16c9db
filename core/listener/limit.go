package listener

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Limits configures Limit. Zero fields are no limit.
type Limits struct {
	// Name names the listener in log lines.
	Name string
	// Logger receives at most one line per LogInterval about refused
	// connections (default slog.Default).
	Logger *slog.Logger
	// LogInterval is the least time between two lines about refused
	// connections (default DefaultLogInterval).
	LogInterval time.Duration

	// MaxConns caps the connections open at once; one over it is closed as
	// soon as it is accepted, never queued.
	MaxConns int
	// MaxPerPeer caps the connections open at once from one peer address
	// (the IP address of a TCP peer; other listeners count all their
	// connections as one peer's).
	MaxPerPeer int
	// FirstRequest bounds the time from accept until the end of the first
	// request header (for a TLS connection, the handshake included): a
	// connection that has not sent it by then fails its reads and writes,
	// and its server closes it. The server's own read deadlines apply
	// after the header.
	FirstRequest time.Duration
	// WriteTimeout bounds each write: every write gets a deadline of
	// WriteTimeout from its start, so a client that reads nothing is
	// dropped after WriteTimeout, and a long response (a stream, a
	// download) lives as long as its client keeps reading.
	WriteTimeout time.Duration
}

// Stats counts a Limited listener's connections.
type Stats struct {
	// Open is how many accepted connections are not yet closed.
	Open int
	// Refused is how many connections were closed at accept by a cap.
	Refused uint64
}

// Limited is a listener whose connections are bounded by Limits; see
// Limit.
type Limited struct {
	net.Listener
	lim Limits
	*counts
}

// counts are the connections of one or more Limited listeners (see Share).
type counts struct {
	mu    sync.Mutex
	open  int
	peers map[string]int

	refused    atomic.Uint64
	logMu      sync.Mutex
	unlogged   uint64 // refusals not yet logged
	lastLogged time.Time
}

// Limit returns ln bounded by lim: Accept closes a connection over
// MaxConns or MaxPerPeer at once and goes on to the next; the connections
// it returns carry the FirstRequest and WriteTimeout deadlines and give
// their place back when closed. They keep their own type reachable with
// NetConn (as a *tls.Conn does). Accept's errors are ln's.
func Limit(ln net.Listener, lim Limits) *Limited {
	if lim.Logger == nil {
		lim.Logger = slog.Default()
	}
	if lim.LogInterval <= 0 {
		lim.LogInterval = DefaultLogInterval
	}
	return &Limited{Listener: ln, lim: lim, counts: &counts{peers: map[string]int{}}}
}

// Share returns ln bounded like l, its connections counted with l's: the
// caps hold for both listeners together (the --http and --https listeners
// of one daemon share one budget of descriptors). name names ln in logs.
func (l *Limited) Share(ln net.Listener, name string) *Limited {
	lim := l.lim
	lim.Name = name
	return &Limited{Listener: ln, lim: lim, counts: l.counts}
}

// Accept returns the next connection within the caps.
func (l *Limited) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		peer := peerOf(c.RemoteAddr())
		if !l.take(peer) {
			_ = c.Close()
			l.refuse(peer)
			continue
		}
		return newConn(c, l.lim, func() { l.give(peer) }), nil
	}
}

// Stats returns the connections open and refused so far (of every
// listener sharing l's counts).
func (l *Limited) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Open: l.open, Refused: l.refused.Load()}
}

// take counts a new connection of peer, or reports false when a cap is
// reached.
func (l *Limited) take(peer string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lim.MaxConns > 0 && l.open >= l.lim.MaxConns {
		return false
	}
	if l.lim.MaxPerPeer > 0 && l.peers[peer] >= l.lim.MaxPerPeer {
		return false
	}
	l.open++
	l.peers[peer]++
	return true
}

// give releases a connection of peer.
func (l *Limited) give(peer string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.peers[peer]--; l.peers[peer] <= 0 {
		delete(l.peers, peer)
	}
}

// refuse counts a refused connection and logs when a line is due.
func (l *Limited) refuse(peer string) {
	l.refused.Add(1)
	l.logMu.Lock()
	defer l.logMu.Unlock()
	l.unlogged++
	now := time.Now()
	if !l.lastLogged.IsZero() && now.Sub(l.lastLogged) < l.lim.LogInterval {
		return
	}
	st := l.Stats()
	l.lim.Logger.Warn("connections over the limit closed at accept", "listener", l.lim.Name, "peer", peer,
		"refused", l.unlogged, "open", st.Open, "max_conns", l.lim.MaxConns, "max_per_peer", l.lim.MaxPerPeer)
	l.unlogged, l.lastLogged = 0, now
}

// peerOf is the key a connection counts under for MaxPerPeer: a TCP
// peer's IP address, else the network's name.
func peerOf(a net.Addr) string {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.IP.String()
	case nil:
		return ""
	}
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.Network()
}

var _ net.Listener = (*Limited)(nil)
