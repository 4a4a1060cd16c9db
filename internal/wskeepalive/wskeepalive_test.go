package wskeepalive_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/guestlink/guestlink/internal/wskeepalive"
	"github.com/guestlink/guestlink/internal/wstest"
)

// pingCounter counts the pings a Keeper sends.
type pingCounter struct {
	*websocket.Conn
	pings chan struct{}
}

func (p *pingCounter) WriteControl(mt int, data []byte, deadline time.Time) error {
	err := p.Conn.WriteControl(mt, data, deadline)
	if mt == websocket.PingMessage {
		select {
		case p.pings <- struct{}{}:
		default:
		}
	}
	return err
}

const (
	interval = 20 * time.Millisecond
	timeout  = 100 * time.Millisecond
	// rounds of pings that span more than three timeouts
	rounds = 3 * int(timeout/interval)
)

// readAll reads c in the background (answering pings, with the handler
// set) until it fails.
func readAll(c *websocket.Conn) {
	go func() {
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				return
			}
		}
	}()
}

// TestKeeper: the daemon's end (a Keeper, read as a relay reads it) of a
// real websocket. Tried: a peer that answers three pings, then no more (as
// behind a NAT that dropped the connection): the Keeper closes it and the
// relay's read fails; a live idle peer that keeps answering over more
// than three timeouts: kept, its read still waiting; a peer that never
// reads its socket (as a client its stdin socket), over more than three
// timeouts: never judged, kept.
func TestKeeper(t *testing.T) {
	t.Run("peer stops answering", func(t *testing.T) {
		srv, peer := wstest.Pair(t)
		var answered atomic.Int32
		peer.SetPingHandler(func(s string) error {
			if answered.Add(1) > 3 {
				return nil // silent from now on
			}
			return peer.WriteControl(websocket.PongMessage, []byte(s), time.Now().Add(time.Second))
		})
		readAll(peer)
		k := wskeepalive.Keep(srv, wskeepalive.Config{Interval: interval, Timeout: timeout})
		defer k.Close()
		read := make(chan error, 1)
		go func() { _, _, err := k.ReadMessage(); read <- err }()
		select {
		case err := <-read:
			if err == nil || !k.Dead() || answered.Load() < 3 {
				t.Fatalf("read ended with %v (dead %v, %d pings answered), want the connection closed for the missing pongs", err, k.Dead(), answered.Load())
			}
		case <-time.After(time.Minute):
			t.Fatal("a peer that stopped answering pings was kept")
		}
	})
	t.Run("live idle peer kept", func(t *testing.T) {
		srv, peer := wstest.Pair(t)
		readAll(peer) // answers every ping, sends nothing
		pongs := make(chan struct{}, rounds)
		k := wskeepalive.Keep(srv, wskeepalive.Config{Interval: interval, Timeout: timeout, OnPong: func() {
			select {
			case pongs <- struct{}{}:
			default:
			}
		}})
		defer k.Close()
		read := make(chan error, 1)
		go func() { _, _, err := k.ReadMessage(); read <- err }()
		for range rounds {
			select {
			case <-pongs:
			case err := <-read:
				t.Fatalf("a live idle peer's read ended: %v (dead %v)", err, k.Dead())
			case <-time.After(time.Minute):
				t.Fatal("no pong within a minute")
			}
		}
		select {
		case err := <-read:
			t.Fatalf("a live idle peer's read ended: %v", err)
		default:
		}
		if k.Dead() {
			t.Fatal("a live idle peer was judged dead")
		}
		// And it still carries messages.
		if err := peer.WriteMessage(websocket.TextMessage, []byte("still here")); err != nil {
			t.Fatal(err)
		}
		if err := <-read; err != nil {
			t.Fatalf("reading after %d pongs: %v", rounds, err)
		}
	})
	t.Run("peer that never reads", func(t *testing.T) {
		srv, _ := wstest.Pair(t) // the peer never reads: it never sees a ping
		pc := &pingCounter{Conn: srv, pings: make(chan struct{}, 1)}
		k := wskeepalive.Keep(pc, wskeepalive.Config{Interval: interval, Timeout: timeout})
		defer k.Close()
		read := make(chan error, 1)
		go func() { _, _, err := k.ReadMessage(); read <- err }()
		for range rounds {
			select {
			case <-pc.pings:
			case err := <-read:
				t.Fatalf("the read of a peer that never reads ended: %v (dead %v)", err, k.Dead())
			case <-time.After(time.Minute):
				t.Fatal("no ping within a minute")
			}
		}
		if k.Dead() {
			t.Fatal("a peer that never read was judged dead")
		}
	})
}
