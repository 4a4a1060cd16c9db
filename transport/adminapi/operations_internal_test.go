package adminapi

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/guestlink/guestlink/internal/wskeepalive"
	"github.com/guestlink/guestlink/internal/wstest"
)

// TestRelay: messages cross the relay both ways with their type (binary
// data, the empty text message that ends a stream); the agent's side
// closing ends the relay and closes the client's side with a close frame;
// the API closing ends a relay whose sides are both quiet.
func TestRelay(t *testing.T) {
	t.Run("both ways, then the agent ends", func(t *testing.T) {
		clientSrv, client := wstest.Pair(t) // the API's end of the client's websocket, and the client
		agent, apiToAgent := wstest.Pair(t) // the agent, and the API's end towards it
		done := make(chan struct{})
		go func() { relay(clientSrv, apiToAgent, nil); close(done) }()

		if err := client.WriteMessage(websocket.BinaryMessage, []byte("in")); err != nil {
			t.Fatal(err)
		}
		if mt, data, err := agent.ReadMessage(); err != nil || mt != websocket.BinaryMessage || string(data) != "in" {
			t.Fatalf("agent got %d %q %v, want binary in", mt, data, err)
		}
		for _, m := range []struct {
			mt   int
			data string
		}{{websocket.BinaryMessage, "out"}, {websocket.TextMessage, ""}} {
			if err := agent.WriteMessage(m.mt, []byte(m.data)); err != nil {
				t.Fatal(err)
			}
			if mt, data, err := client.ReadMessage(); err != nil || mt != m.mt || string(data) != m.data {
				t.Fatalf("client got %d %q %v, want %d %q", mt, data, err, m.mt, m.data)
			}
		}
		agent.Close()
		<-done
		_, _, err := client.ReadMessage()
		if !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
			t.Fatalf("client after the agent ended: %v, want a normal close", err)
		}
	})
	t.Run("API shutdown", func(t *testing.T) {
		clientSrv, client := wstest.Pair(t)
		agent, apiToAgent := wstest.Pair(t)
		closing := make(chan struct{})
		done := make(chan struct{})
		go func() { relay(clientSrv, apiToAgent, closing); close(done) }()
		close(closing)
		<-done
		for name, c := range map[string]*websocket.Conn{"client": client, "agent": agent} {
			if _, _, err := c.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
				t.Errorf("%s after shutdown: %v, want a normal close", name, err)
			}
		}
	})
}

// TestRelayDeadPeer: with short pings, a client that stops answering them
// (as one behind a NAT that dropped the connection) is closed and the
// relay ends, the agent told with a normal close (the command's other end
// learns it); a live idle pair is kept over more than three pong
// deadlines and still carries a message. Before the relay pinged, the
// dead client's session stayed open for good.
func TestRelayDeadPeer(t *testing.T) {
	old := relayKeepalive
	pongs := make(chan struct{}, 1)
	relayKeepalive = wskeepalive.Config{Interval: 20 * time.Millisecond, Timeout: 100 * time.Millisecond, OnPong: func() {
		select {
		case pongs <- struct{}{}:
		default:
		}
	}}
	t.Cleanup(func() { relayKeepalive = old })
	answering := func(c *websocket.Conn, answer func() bool) {
		c.SetPingHandler(func(s string) error {
			if !answer() {
				return nil
			}
			return c.WriteControl(websocket.PongMessage, []byte(s), time.Now().Add(time.Second))
		})
	}

	t.Run("client stops answering", func(t *testing.T) {
		clientSrv, client := wstest.Pair(t)
		agent, apiToAgent := wstest.Pair(t)
		var pings atomic.Int32
		answering(client, func() bool { return pings.Add(1) <= 3 })
		go func() {
			for {
				if _, _, err := client.ReadMessage(); err != nil {
					return
				}
			}
		}()
		done := make(chan struct{})
		go func() { relay(clientSrv, apiToAgent, nil); close(done) }()
		agentRead := make(chan error, 1)
		go func() { _, _, err := agent.ReadMessage(); agentRead <- err }()
		select {
		case err := <-agentRead:
			if !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
				t.Fatalf("agent after the client went silent: %v, want a normal close", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("the relay kept a client that stopped answering pings")
		}
		<-done
	})
	t.Run("live idle pair kept", func(t *testing.T) {
		clientSrv, client := wstest.Pair(t)
		agent, apiToAgent := wstest.Pair(t)
		for _, c := range []*websocket.Conn{client, agent} {
			go func() {
				for {
					if _, _, err := c.ReadMessage(); err != nil {
						return
					}
				}
			}()
		}
		done := make(chan struct{})
		go func() { relay(clientSrv, apiToAgent, nil); close(done) }()
		for range 30 { // over 3 deadlines at 20 ms per round
			select {
			case <-pongs:
			case <-done:
				t.Fatal("the relay of a live idle pair ended")
			case <-time.After(time.Minute):
				t.Fatal("no pong within a minute")
			}
		}
		select {
		case <-done:
			t.Fatal("the relay of a live idle pair ended")
		default:
		}
		client.Close()
		<-done
	})
}
