package adminapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
)

// wsPair returns both ends of a real websocket connection.
func wsPair(t *testing.T) (server, client *websocket.Conn) {
	t.Helper()
	got := make(chan *websocket.Conn, 1)
	up := websocket.Upgrader{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		got <- c
	}))
	t.Cleanup(ts.Close)
	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(ts.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := <-got
	t.Cleanup(func() { c.Close(); s.Close() })
	return s, c
}

// TestRelay: messages cross the relay both ways with their type (binary
// data, the empty text message that ends a stream); the agent's side
// closing ends the relay and closes the client's side with a close frame;
// the API closing ends a relay whose sides are both quiet.
func TestRelay(t *testing.T) {
	t.Run("both ways, then the agent ends", func(t *testing.T) {
		clientSrv, client := wsPair(t) // the API's end of the client's websocket, and the client
		agent, apiToAgent := wsPair(t) // the agent, and the API's end towards it
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
		clientSrv, client := wsPair(t)
		agent, apiToAgent := wsPair(t)
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
