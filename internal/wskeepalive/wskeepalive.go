// Package wskeepalive keeps the daemon's end of a relayed websocket alive
// and notices a dead peer: it pings the peer every Interval (so a proxy
// or a NAT in between sees traffic on an idle shell) and closes the
// connection once a peer that has answered a ping leaves Timeout without
// a pong, so the relay ends and tells the other side with a close frame.
//
// A peer's pongs are read by its reader (gorilla's and fasthttp's
// websockets answer pings and see pongs only inside ReadMessage): a peer
// that never reads its socket (LXD's stdin and control sockets on the
// client side, stdout and stderr on the agent's) never answers, and is
// pinged but never judged; nor is a peer while the relay is not reading
// its socket (the relay is busy writing the other way).
package wskeepalive

import (
	"sync"
	"time"
)

// Defaults of Config: a ping every 25 s keeps a proxy's or a NAT's idle
// timeout of 60 s or more from cutting an idle shell; three missed
// intervals end a dead peer's session.
const (
	DefaultInterval = 25 * time.Second
	DefaultTimeout  = 75 * time.Second
)

// Websocket message types (RFC 6455), as gorilla and fasthttp number them.
const (
	pingMessage = 9
)

// Conn is the part of a websocket connection a Keeper uses (gorilla's and
// fasthttp's connections both have it).
type Conn interface {
	ReadMessage() (int, []byte, error)
	WriteMessage(messageType int, data []byte) error
	WriteControl(messageType int, data []byte, deadline time.Time) error
	SetPongHandler(h func(appData string) error)
	SetReadDeadline(t time.Time) error
	Close() error
}

// Config is a Keeper's timing; zero fields take the defaults.
type Config struct {
	Interval time.Duration // between pings
	Timeout  time.Duration // without a pong (while read) before the peer is dead
	// OnPong, if set, is called after each pong (tests count them).
	OnPong func()
}

// Keeper is a websocket connection whose peer is pinged, with a pong
// deadline; it is used in place of the connection (ReadMessage,
// WriteMessage, WriteControl, Close). Close ends its pings.
type Keeper struct {
	c   Conn
	cfg Config

	mu       sync.Mutex
	answered bool      // a pong came: the peer reads, so it is held to the timeout
	last     time.Time // the last pong, or when the relay last started reading
	reading  bool      // the relay waits in ReadMessage
	dead     bool      // closed for its missing pongs

	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// Keep starts pinging c's peer and returns c wrapped; the caller reads
// and writes through the Keeper and closes it when done.
func Keep(c Conn, cfg Config) *Keeper {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	k := &Keeper{c: c, cfg: cfg, last: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	c.SetPongHandler(func(string) error {
		k.mu.Lock()
		k.answered, k.last = true, time.Now()
		k.mu.Unlock()
		if cfg.OnPong != nil {
			cfg.OnPong()
		}
		return nil
	})
	go k.run()
	return k
}

// run pings every interval and closes the connection of a dead peer.
func (k *Keeper) run() {
	defer close(k.done)
	t := time.NewTicker(k.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case now := <-t.C:
			k.mu.Lock()
			dead := k.answered && k.reading && now.Sub(k.last) > k.cfg.Timeout
			k.dead = k.dead || dead
			k.mu.Unlock()
			if dead {
				k.kill()
				return
			}
			// A ping the peer's connection cannot take within the
			// timeout (no TCP window left: nothing is read) is a dead
			// peer too, judged or not.
			if err := k.c.WriteControl(pingMessage, nil, time.Now().Add(k.cfg.Timeout)); err != nil {
				k.mu.Lock()
				k.dead = true
				k.mu.Unlock()
				k.kill()
				return
			}
		}
	}
}

// kill makes the relay's read fail, so that it ends the session and tells
// the other side: a read deadline in the past (fasthttp's Close of a
// hijacked connection waits for its handler, so a read in progress would
// go on), then the close.
func (k *Keeper) kill() {
	_ = k.c.SetReadDeadline(time.Now())
	_ = k.c.Close()
}

// ReadMessage reads the next message; the peer's pongs are seen meanwhile.
func (k *Keeper) ReadMessage() (int, []byte, error) {
	k.mu.Lock()
	if !k.reading {
		// Not read until now: its silence before does not count.
		k.reading, k.last = true, time.Now()
	}
	k.mu.Unlock()
	mt, data, err := k.c.ReadMessage()
	k.mu.Lock()
	k.reading = false
	k.mu.Unlock()
	return mt, data, err
}

// WriteMessage writes a message to the peer.
func (k *Keeper) WriteMessage(messageType int, data []byte) error {
	return k.c.WriteMessage(messageType, data)
}

// WriteControl writes a control message (a close frame) to the peer.
func (k *Keeper) WriteControl(messageType int, data []byte, deadline time.Time) error {
	return k.c.WriteControl(messageType, data, deadline)
}

// Dead reports whether the connection was closed because its peer stopped
// answering pings.
func (k *Keeper) Dead() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.dead
}

// Close ends the pings and closes the connection.
func (k *Keeper) Close() error {
	k.stopOnce.Do(func() { close(k.stop) })
	<-k.done
	return k.c.Close()
}
