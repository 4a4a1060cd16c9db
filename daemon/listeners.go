package daemon

import (
	"net"
	"syscall"
	"time"

	"github.com/guestlink/guestlink/core/listener"
)

// TCPLimits bound the connections of the TCP listeners (--http, --https and
// the cluster listener), which anyone who can reach them may open before
// authenticating. Zero fields take the defaults, derived from the open-file
// limit (see defaultTCPConns).
type TCPLimits struct {
	// MaxConns caps the connections open at once over all TCP listeners;
	// one over it is closed at accept.
	MaxConns int
	// MaxPerPeer caps the connections open at once from one IP address.
	MaxPerPeer int
	// FirstRequest bounds the time a new connection has to finish its TLS
	// handshake and send its first request header (default
	// DefaultFirstRequestTimeout).
	FirstRequest time.Duration
}

// Defaults of the listeners' timeouts.
const (
	// DefaultFirstRequestTimeout is TCPLimits.FirstRequest's default.
	DefaultFirstRequestTimeout = 10 * time.Second
	// DefaultWriteTimeout is Config.WriteTimeout's default: how long one
	// write to a client of the admin API or the dashboard may block.
	DefaultWriteTimeout = 30 * time.Second
)

// maxDefaultTCPConns bounds the derived TCP budget: past a few thousand
// clients the memory of their connections matters more than descriptors.
const maxDefaultTCPConns = 4096

// openFileLimit returns the soft RLIMIT_NOFILE, or 0 when it is unknown or
// practically unlimited.
func openFileLimit() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur > 1<<24 {
		return 0
	}
	return int(lim.Cur)
}

// defaultTCPConns is the TCP listeners' share of the open-file limit: half
// of what the guests' links leave (linkDescriptors), the other half kept
// for the store, the plugins, the admin socket and devlxd; at least 16, at
// most maxDefaultTCPConns. At 512 open files that is 224 connections, at
// 1,048,576 it is 4,096.
func defaultTCPConns() int {
	limit := openFileLimit()
	if limit == 0 {
		return maxDefaultTCPConns
	}
	return min(maxDefaultTCPConns, max(16, (limit-linkDescriptors())/2))
}

// tcpLimits returns cfg with its defaults: MaxPerPeer is a quarter of
// MaxConns, at least 64 (clients on the host itself all share one address).
func tcpLimits(cfg TCPLimits) TCPLimits {
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = defaultTCPConns()
	}
	if cfg.MaxPerPeer <= 0 {
		cfg.MaxPerPeer = min(cfg.MaxConns, max(64, cfg.MaxConns/4))
	}
	if cfg.FirstRequest <= 0 {
		cfg.FirstRequest = DefaultFirstRequestTimeout
	}
	return cfg
}

// retrying returns ln with an Accept that outlives every error but a
// close (listener.Retry), logging as what.
func (d *Daemon) retrying(ln net.Listener, what string) net.Listener {
	return listener.Retry(ln, listener.RetryConfig{Name: what, Logger: d.log.With("component", "listener")})
}

// localConns returns ln (the admin socket) with the write timeout: the
// daemon's own users are not capped, but a client that stops reading is
// dropped.
func (d *Daemon) localConns(ln net.Listener, what string) net.Listener {
	return listener.Limit(d.retrying(ln, what), listener.Limits{Name: what, Logger: d.log.With("component", "listener"),
		WriteTimeout: d.cfg.WriteTimeout})
}

// tcpConns returns ln bounded by the daemon's TCP limits; raw is the TCP
// listener under ln (ln may be a TLS listener over it), which is what
// retries. All TCP listeners share one budget.
func (d *Daemon) tcpConns(raw net.Listener, wrap func(net.Listener) net.Listener, what string) net.Listener {
	var ln net.Listener = d.retrying(raw, what)
	if wrap != nil {
		ln = wrap(ln)
	}
	d.tcpMu.Lock()
	defer d.tcpMu.Unlock()
	if d.tcpBudget == nil {
		lim := tcpLimits(d.cfg.TCPLimits)
		d.tcpBudget = listener.Limit(ln, listener.Limits{Name: what, Logger: d.log.With("component", "listener"),
			MaxConns: lim.MaxConns, MaxPerPeer: lim.MaxPerPeer, FirstRequest: lim.FirstRequest,
			WriteTimeout: d.cfg.WriteTimeout})
		d.log.Info("TCP connection limits", "max_conns", lim.MaxConns, "max_per_peer", lim.MaxPerPeer,
			"first_request", lim.FirstRequest, "write_timeout", d.cfg.WriteTimeout, "link_descriptors", linkDescriptors())
		return d.tcpBudget
	}
	return d.tcpBudget.Share(ln, what)
}
