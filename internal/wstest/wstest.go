// Package wstest gives tests both ends of a real websocket connection, for
// the packages that relay or keep websockets alive (the admin API's exec
// relay, the dashboard's terminal, internal/wskeepalive).
package wstest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
)

// Pair returns both ends of a real websocket connection over loopback
// TCP; the test's cleanup closes both and the server.
func Pair(t testing.TB) (server, client *websocket.Conn) {
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
