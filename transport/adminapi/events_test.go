package adminapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/transport/adminapi"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

// wireEvent is an event as received, with its lifecycle metadata decoded.
type wireEvent struct {
	ID       int64  `json:"id"`
	Type     string `json:"type"`
	Metadata struct {
		Action    string           `json:"action"`
		Source    string           `json:"source"`
		Requestor events.Requestor `json:"requestor"`
	} `json:"metadata"`
}

// dialEvents opens the events websocket with a query string.
func dialEvents(t *testing.T, srv *apitest.Server, query string) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{
		NetDialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return srv.Dial(ctx, "", "")
		},
		HandshakeTimeout: 10 * time.Second,
	}
	conn, resp, err := d.Dial("ws://guestlink/1.0/events"+query, nil)
	if err != nil {
		t.Fatalf("dialing events%s: %v (%v)", query, err, resp)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// readEvent reads one event, failing after a generous timeout.
func readEvent(t *testing.T, conn *websocket.Conn) wireEvent {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	var ev wireEvent
	if err := conn.ReadJSON(&ev); err != nil {
		t.Fatalf("reading event: %v", err)
	}
	return ev
}

// publish publishes a lifecycle event for inst and returns its id.
func publish(t *testing.T, srv *apitest.Server, action, inst, pad string) int64 {
	t.Helper()
	md, _ := json.Marshal(map[string]any{"action": action, "source": "/1.0/instances/" + inst, "context": map[string]any{"pad": pad}})
	ev, err := srv.Bus.Publish(context.Background(), events.Event{Type: events.TypeLifecycle, Instance: inst, Metadata: md})
	if err != nil {
		t.Fatal(err)
	}
	return ev.ID
}

// waitSubscribed waits until the websocket's subscription is live, by
// publishing probe events for a name the filter passes until one arrives.
func waitSubscribed(t *testing.T, srv *apitest.Server, conn *websocket.Conn, inst string) int64 {
	t.Helper()
	id := publish(t, srv, "probe", inst, "")
	ev := readEvent(t, conn)
	if ev.ID != id || ev.Metadata.Action != "probe" {
		t.Fatalf("first event = %+v, want probe %d", ev, id)
	}
	return id
}

func TestEventsFilter(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{})
	conn := dialEvents(t, srv, "?type=lifecycle&instance=a1,c1")
	// The subscription is made before the upgrade answer: events published
	// from now on reach it.
	mustCall(t, srv, "POST", "/1.0/instances", `{"name":"b1","backend":"sim"}`, 201)
	mustCall(t, srv, "POST", "/1.0/instances", `{"name":"a1","backend":"sim"}`, 201)
	_, _ = srv.Bus.Publish(context.Background(), events.Event{Type: events.TypeLogging, Instance: "a1", Metadata: json.RawMessage(`{"message":"x"}`)})
	mustCall(t, srv, "PUT", "/1.0/instances/a1/state", `{"action":"start"}`, 200)
	mustCall(t, srv, "PUT", "/1.0/instances/b1/state", `{"action":"start"}`, 200)
	mustCall(t, srv, "POST", "/1.0/instances", `{"name":"c1","backend":"sim"}`, 201)

	var got []string
	var last int64
	for range 3 {
		ev := readEvent(t, conn)
		if ev.ID <= last {
			t.Fatalf("ids not increasing: %d after %d", ev.ID, last)
		}
		last = ev.ID
		got = append(got, ev.Metadata.Action+" "+ev.Metadata.Source+" "+ev.Metadata.Requestor.Protocol)
	}
	want := []string{
		"instance-created /1.0/instances/a1 unix",
		"instance-started /1.0/instances/a1 unix",
		"instance-created /1.0/instances/c1 unix",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestEventsResume(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{})
	var ids []int64
	for i := range 5 {
		ids = append(ids, publish(t, srv, fmt.Sprintf("step-%d", i), "r1", ""))
	}
	conn := dialEvents(t, srv, fmt.Sprintf("?since=%d", ids[1]))
	for _, want := range ids[2:] {
		if ev := readEvent(t, conn); ev.ID != want {
			t.Fatalf("resumed event id %d, want %d", ev.ID, want)
		}
	}
	// Then live events, without a gap.
	live := publish(t, srv, "live", "r1", "")
	if ev := readEvent(t, conn); ev.ID != live || ev.Metadata.Action != "live" {
		t.Fatalf("live event = %+v, want id %d", ev, live)
	}
}

// TestEventsSinceZero checks that since=0 replays the stored log from its
// first event (guestlink monitor --since 0), then live events.
func TestEventsSinceZero(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{})
	var ids []int64
	for i := range 3 {
		ids = append(ids, publish(t, srv, fmt.Sprintf("step-%d", i), "z1", ""))
	}
	conn := dialEvents(t, srv, "?since=0")
	for _, want := range ids {
		if ev := readEvent(t, conn); ev.ID != want {
			t.Fatalf("replayed event id %d, want %d", ev.ID, want)
		}
	}
	if ids[0] != 1 {
		t.Fatalf("first event id %d, want 1", ids[0])
	}
	live := publish(t, srv, "live", "z1", "")
	if ev := readEvent(t, conn); ev.ID != live {
		t.Fatalf("live event id %d, want %d", ev.ID, live)
	}
}

func TestEventsOverflowResume(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{BusBuffer: 4})
	conn := dialEvents(t, srv, "?instance=o1")
	waitSubscribed(t, srv, conn, "o1")

	// The client does not read: the socket buffers fill, the writer blocks
	// and the subscription overflows.
	pad := strings.Repeat("p", 8192)
	const n = 400
	var lastID int64
	for range n {
		lastID = publish(t, srv, "burst", "o1", pad)
	}

	seen := map[int64]bool{}
	var last int64
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	var closeErr *websocket.CloseError
	for {
		var ev wireEvent
		err := conn.ReadJSON(&ev)
		if errors.As(err, &closeErr) {
			break
		}
		if err != nil {
			t.Fatalf("reading before close: %v", err)
		}
		seen[ev.ID], last = true, ev.ID
	}
	if closeErr.Code != adminapi.CloseTryAgainLater {
		t.Fatalf("close code %d, want %d", closeErr.Code, adminapi.CloseTryAgainLater)
	}
	wantText := fmt.Sprintf("event subscription ended (event subscriber fell behind); resume with since=%d", last)
	if closeErr.Text != wantText {
		t.Fatalf("close text %q, want %q", closeErr.Text, wantText)
	}
	if last >= lastID {
		t.Fatalf("no overflow: got every event up to %d", last)
	}

	// Resume from the close message's id: the rest arrives, nothing twice.
	conn2 := dialEvents(t, srv, fmt.Sprintf("?instance=o1&since=%d", last))
	for want := last + 1; want <= lastID; want++ {
		ev := readEvent(t, conn2)
		if ev.ID != want || seen[ev.ID] {
			t.Fatalf("resumed id %d, want %d", ev.ID, want)
		}
	}
}

func TestEventsPingAndShutdown(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{PingInterval: 50 * time.Millisecond})
	conn := dialEvents(t, srv, "")
	pinged := make(chan struct{}, 1)
	conn.SetPingHandler(func(data string) error {
		select {
		case pinged <- struct{}{}:
		default:
		}
		return conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
	})
	readErr := make(chan error, 1)
	go func() {
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				readErr <- err
				return
			}
		}
	}()
	select {
	case <-pinged:
	case <-time.After(20 * time.Second):
		t.Fatal("no keep-alive ping")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.API.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	err := <-readErr
	if !websocket.IsCloseError(err, adminapi.CloseGoingAway) {
		t.Fatalf("after shutdown: %v, want close %d", err, adminapi.CloseGoingAway)
	}
}
