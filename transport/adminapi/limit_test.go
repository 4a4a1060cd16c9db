package adminapi

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
)

// limitServer serves a /1.0 group with the limiter: /1.0/slow blocks until
// release is closed (after saying it started on started), /1.0/events
// answers at once. It returns the base URL and the API.
func limitServer(t *testing.T, lim Limits, started chan<- string, release <-chan struct{}) (string, *API) {
	t.Helper()
	a := &API{cfg: Config{Limits: lim, BodyLimit: DefaultBodyLimit}, log: slog.New(slog.DiscardHandler)}
	app := fiber.New(FiberConfig(0))
	v1 := app.Group("/1.0", a.envelopeErrors, a.limit)
	v1.Get("/slow", func(c *fiber.Ctx) error {
		started <- c.Query("id")
		<-release
		return sync200(c, "done")
	})
	v1.Get("/events", func(c *fiber.Ctx) error { return sync200(c, "stream") })
	v1.Get("/instances", func(c *fiber.Ctx) error {
		started <- "list"
		<-release
		return sync200(c, []string{})
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- app.Listener(ln) }()
	t.Cleanup(func() {
		_ = app.ShutdownWithTimeout(10 * time.Second)
		<-served
	})
	return "http://" + ln.Addr().String(), a
}

type answer struct {
	code       int
	retryAfter string
	env        api.Response[any]
}

func get(t *testing.T, url string) answer {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return answer{}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	if err := json.Unmarshal(raw, &a.env); err != nil {
		t.Errorf("GET %s: not an envelope: %s", url, raw)
	}
	return a
}

func TestLimits(t *testing.T) {
	tests := []struct {
		name      string
		lim       Limits
		hold      int    // requests held in the handler first
		then      string // path of the request under test
		wantCode  int
		wantText  string
		queueWait bool // the request waits in the queue, then is refused
	}{
		{"queue full: refused at once", Limits{MaxInFlight: 2, MaxQueue: 1, QueueWait: time.Minute}, 3, "/1.0/slow?id=x", 503,
			"the daemon is busy: 2 requests are running and 1 waiting (limits 2 and 1); retry after 1 s", false},
		{"queue wait expires", Limits{MaxInFlight: 1, MaxQueue: 4, QueueWait: 50 * time.Millisecond, RetryAfter: 1500 * time.Millisecond}, 1, "/1.0/slow?id=x", 503,
			"retry after 2 s", true},
		{"event stream not counted", Limits{MaxInFlight: 1, MaxQueue: 1, QueueWait: time.Minute}, 2, "/1.0/events", 200, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			started, release := make(chan string, 16), make(chan struct{})
			base, api := limitServer(t, tt.lim, started, release)
			held := make(chan answer, tt.hold)
			for i := range tt.hold {
				go func() { held <- get(t, base+"/1.0/slow?id=held") }()
				if i < tt.lim.MaxInFlight {
					<-started // running, holding a slot
				}
			}
			if tt.hold > tt.lim.MaxInFlight {
				// The others wait in the queue: wait until they do.
				waitQueued(t, api, tt.hold-tt.lim.MaxInFlight)
			}
			start := time.Now()
			got := get(t, base+tt.then)
			if got.code != tt.wantCode {
				t.Fatalf("status %d (%+v), want %d", got.code, got.env, tt.wantCode)
			}
			if tt.wantCode == 503 {
				if got.env.Type != "error" || got.env.ErrorCode != 503 || got.env.Error != tt.wantText && !strings.HasSuffix(got.env.Error, tt.wantText) {
					t.Fatalf("envelope %+v, want error 503 %q", got.env, tt.wantText)
				}
				if got.retryAfter == "" {
					t.Fatal("no Retry-After header")
				}
				if waited := time.Since(start); tt.queueWait != (waited >= tt.lim.QueueWait) {
					t.Fatalf("refused after %v (queue wait %v), want queued: %v", waited, tt.lim.QueueWait, tt.queueWait)
				}
			}
			close(release)
			for range tt.hold {
				if a := <-held; a.code != 200 {
					t.Fatalf("held request: %d %+v", a.code, a.env)
				}
			}
		})
	}
}

// waitQueued waits until n requests wait in a's queue.
func waitQueued(t *testing.T, a *API, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for a.lim.other.waiting.Load() < int64(n) {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests queued, want %d", a.lim.other.waiting.Load(), n)
		}
		time.Sleep(time.Millisecond) // polling a counter, not guessing a delay
	}
}

// TestListsHaveTheirOwnSlots: a flood of instance lists fills the lists'
// slots and queue, not the other requests'.
func TestListsHaveTheirOwnSlots(t *testing.T) {
	started, release := make(chan string, 16), make(chan struct{})
	base, _ := limitServer(t, Limits{MaxInFlight: 1, MaxLists: 1, QueueWait: 50 * time.Millisecond}, started, release)
	held := make(chan answer, 2)
	go func() { held <- get(t, base+"/1.0/instances") }()
	<-started
	if got := get(t, base+"/1.0/instances"); got.code != 503 || !strings.Contains(got.env.Error, "1 instance lists are running") {
		t.Fatalf("second list: %d %+v, want 503 for the lists' limit", got.code, got.env)
	}
	go func() { held <- get(t, base+"/1.0/slow?id=other") }()
	if id := <-started; id != "other" {
		t.Fatalf("started %q, want the other request", id)
	}
	close(release)
	for range 2 {
		if a := <-held; a.code != 200 {
			t.Fatalf("held request: %d %+v", a.code, a.env)
		}
	}
}
