package listener

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// RetryConfig configures Retry.
type RetryConfig struct {
	// Name names the listener in log lines ("http", "admin socket").
	Name string
	// Logger receives one line per LogInterval while accepts fail, and one
	// when they succeed again (default slog.Default).
	Logger *slog.Logger
	// LogInterval is the least time between two lines about failing
	// accepts (default DefaultLogInterval).
	LogInterval time.Duration
}

// Retry returns ln with an Accept that never fails but for a closed
// listener: after any other error (EMFILE when the process is out of
// descriptors, ENFILE, ECONNABORTED, ...) it waits a back-off (NewBackoff)
// and accepts again. The first failure is logged at once, then at most one
// line per LogInterval with the errors counted since the last line
// ("accept failing, backing off", or "accepting again" once an accept
// succeeded): errors that come between two lines are logged, counted, with
// the next one. Closing the returned listener closes
// ln and ends a waiting Accept with an error wrapping net.ErrClosed.
//
// Servers that end on any accept error (fasthttp's, so fiber's) serve the
// returned listener to outlive a flood of connections.
func Retry(ln net.Listener, cfg RetryConfig) net.Listener {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.LogInterval <= 0 {
		cfg.LogInterval = DefaultLogInterval
	}
	return &retrying{Listener: ln, cfg: cfg, bo: NewBackoff(), closed: make(chan struct{})}
}

type retrying struct {
	net.Listener
	cfg RetryConfig

	closed chan struct{}
	once   sync.Once

	mu       sync.Mutex
	bo       *backoff.ExponentialBackOff
	failures int         // errors not yet logged
	lastErr  error       // the last of them
	failing  bool        // the last accept failed
	lastLog  time.Time   // of the last line about failures
	flush    *time.Timer // logs the errors not yet logged when a line is due
}

func (r *retrying) Accept() (net.Conn, error) {
	for {
		if r.isClosed() {
			return nil, &net.OpError{Op: "accept", Net: r.Addr().Network(), Addr: r.Addr(), Err: net.ErrClosed}
		}
		c, err := r.Listener.Accept()
		if err == nil {
			r.succeeded()
			return c, nil
		}
		if r.isClosed() || errors.Is(err, net.ErrClosed) {
			return nil, err
		}
		t := time.NewTimer(r.failed(err))
		select {
		case <-t.C:
		case <-r.closed:
			t.Stop()
			return nil, &net.OpError{Op: "accept", Net: r.Addr().Network(), Addr: r.Addr(), Err: net.ErrClosed}
		}
	}
}

// failed counts err, logs it when a line is due and returns the wait
// before the next accept.
func (r *retrying) failed(err error) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	delay := r.bo.NextBackOff()
	r.failures++
	r.failing, r.lastErr = true, err
	if r.due(time.Now()) {
		r.logLocked(delay)
	} else {
		r.armLocked()
	}
	return delay
}

// succeeded resets the back-off after a failure. The errors not yet
// logged are logged when a line is due (at once, or by the timer):
// however accepts alternate between failing and succeeding, there is at
// most one line per LogInterval, and every error is counted in one.
func (r *retrying) succeeded() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.failing {
		return
	}
	r.failing = false
	r.bo.Reset()
	if r.due(time.Now()) {
		r.logLocked(0)
	} else {
		r.armLocked()
	}
}

// due reports whether a line may be logged at now. r.mu is held.
func (r *retrying) due(now time.Time) bool {
	return r.lastLog.IsZero() || now.Sub(r.lastLog) >= r.cfg.LogInterval
}

// logLocked logs the errors not yet logged: "accept failing, backing off"
// while accepts fail, "accepting again" once one succeeded. r.mu is held.
func (r *retrying) logLocked(delay time.Duration) {
	if r.failures == 0 {
		return
	}
	if r.failing {
		r.cfg.Logger.Warn("accept failing, backing off", "listener", r.cfg.Name, "addr", r.Addr().String(),
			"err", r.lastErr, "errors", r.failures, "backoff", delay, "temporary", Temporary(r.lastErr))
	} else {
		r.cfg.Logger.Info("accepting again", "listener", r.cfg.Name, "addr", r.Addr().String(),
			"err", r.lastErr, "errors", r.failures)
	}
	r.failures, r.lastLog = 0, time.Now()
}

// armLocked makes sure the errors not yet logged are logged once the next
// line is due. r.mu is held.
func (r *retrying) armLocked() {
	if r.flush != nil || r.isClosed() {
		return
	}
	r.flush = time.AfterFunc(time.Until(r.lastLog.Add(r.cfg.LogInterval)), func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.flush = nil
		if !r.isClosed() {
			r.logLocked(r.bo.InitialInterval)
		}
	})
}

func (r *retrying) isClosed() bool {
	select {
	case <-r.closed:
		return true
	default:
		return false
	}
}

// Close closes the listener; a waiting Accept returns.
func (r *retrying) Close() error {
	r.once.Do(func() {
		close(r.closed)
		r.mu.Lock()
		if r.flush != nil {
			r.flush.Stop()
			r.flush = nil
		}
		r.mu.Unlock()
	})
	return r.Listener.Close()
}
