// Package devlxdproxy serves /dev/lxd/sock in the guest: every devlxd
// endpoint but the event stream is forwarded to the daemon and its envelope
// unwrapped into the plain format guests expect; GET /1.0/events is served
// locally from the agent's event hub.
package devlxdproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/guestlink/guestlink/agent/eventhub"
	"github.com/guestlink/guestlink/agent/upstream"
	"github.com/guestlink/guestlink/link/devlxdapi"
	"github.com/guestlink/guestlink/link/unixsock"
)

// Server timeouts and limits (devlxd.md).
const (
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout = 3 * time.Second
	// IdleTimeout closes idle keep-alive connections.
	IdleTimeout = 30 * time.Second
	// MaxBody is the largest request body forwarded, in bytes.
	MaxBody = 1 << 20
	// PingPeriod is the websocket ping interval.
	PingPeriod = 10 * time.Second
	// PongWait is how long a websocket client may go without answering a
	// ping before it is dropped.
	PongWait = 2*PingPeriod + 5*time.Second
	// MetaDataAttempts and MetaDataRetryWait: GET /1.0/meta-data tries to
	// reach the daemon this many times, waiting this long after each
	// failure, before answering 500 (LXD's agent: 10 × 500 ms), so that an
	// early-boot outage does not fail cloud-init at once.
	MetaDataAttempts  = 10
	MetaDataRetryWait = 500 * time.Millisecond
	// unreachablePrefix starts the 500 answer when the daemon cannot be
	// reached: LXD's agent's text, kept whatever the link is (clients may
	// match it).
	unreachablePrefix = "Failed connecting to devLXD over vsock: "
)

// Upstream is the daemon as the proxy needs it.
type Upstream interface {
	// Raw sends a request to the daemon and returns its HTTP response.
	// Errors wrap upstream.ErrNoAdvertisement or upstream.ErrUnreachable.
	Raw(ctx context.Context, method, path string, body []byte) (*http.Response, error)
	// RawHeader is Raw forwarding the guest's Authorization (a devlxd
	// bearer token, so the daemon can authenticate it) and If-Match (an
	// ETag of the trusted API) headers; an empty one is not sent.
	RawHeader(ctx context.Context, method, path string, body []byte, h upstream.Header) (*http.Response, error)
}

var _ Upstream = (*upstream.Client)(nil)

// Handler is the http.Handler of /dev/lxd/sock.
type Handler struct {
	// Upstream is the daemon.
	Upstream Upstream
	// Events is the hub GET /1.0/events subscribes to.
	Events *eventhub.Hub
	// OnDeclared, if set, is called with the declaration ("Ready",
	// "Started" or "Degraded", with its reason and message) after the
	// daemon accepted a PATCH /1.0 from the guest.
	OnDeclared func(put devlxdapi.StatePut)
	// OnUnreachable, if set, is called when the daemon could not be reached.
	OnUnreachable func(err error)
	// OnReached, if set, is called when the daemon answered.
	OnReached func()
	// Log receives request failures; nil discards them.
	Log *slog.Logger
	// PingPeriod and PongWait override the websocket keep-alive (for
	// tests); zero means the package defaults.
	PingPeriod, PongWait time.Duration
	// RetryWait overrides MetaDataRetryWait (for tests); zero means the
	// package default.
	RetryWait time.Duration

	// vm records that the daemon said this guest is a virtual machine
	// (devlxdapi.HeaderInstanceType on its answers): GET / is then
	// answered here, as LXD's VM agent does, even while the daemon is
	// down. Until the daemon has answered once, the agent does not know.
	vm atomic.Bool
}

var _ http.Handler = (*Handler)(nil)

func (h *Handler) log() *slog.Logger {
	if h.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Log
}

// lxdMethods are the methods LXD's devlxd routes; any other one is
// answered here, as LXD's agent does, without asking the daemon.
var lxdMethods = map[string]bool{
	http.MethodHead: true, http.MethodGet: true, http.MethodPost: true,
	http.MethodPut: true, http.MethodPatch: true, http.MethodDelete: true,
}

// ServeHTTP serves one guest request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !lxdMethods[r.Method] {
		http.Error(w, fmt.Sprintf("Method %q not found", r.Method), http.StatusNotFound)
		return
	}
	if r.URL.Path == "/1.0/events" && r.Method == http.MethodGet {
		h.serveEvents(w, r)
		return
	}
	if r.URL.Path == "/" && r.Method == http.MethodGet && h.vm.Load() {
		// LXD's VM agent lists the API versions itself.
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `["/`+devlxdapi.APIVersion+`"]`+"\n")
		return
	}
	h.forward(w, r)
}

func (h *Handler) forward(w http.ResponseWriter, r *http.Request) {
	var body []byte
	if r.Body != nil && r.Method != http.MethodGet && r.Method != http.MethodHead {
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				http.Error(w, fmt.Sprintf("Request body too large (limit %d bytes)", MaxBody), http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, fmt.Sprintf("Invalid request body: %v", err), http.StatusBadRequest)
			return
		}
		body = b
	}
	path := r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		path += "?" + r.URL.RawQuery
	}
	resp, err := h.roundTrip(r, path, body)
	if err != nil {
		h.unavailable(w, r, err)
		return
	}
	defer resp.Body.Close()
	if h.OnReached != nil {
		h.OnReached()
	}
	if t := resp.Header.Get(devlxdapi.HeaderInstanceType); t != "" {
		h.vm.Store(t == devlxdapi.InstanceTypeVM)
	}
	if r.Method == http.MethodHead {
		// A HEAD answer has no body (no envelope): its status is the answer.
		if resp.StatusCode >= 400 {
			http.Error(w, http.StatusText(resp.StatusCode), resp.StatusCode)
			return
		}
		w.WriteHeader(resp.StatusCode)
		return
	}
	if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/1.0/images/") {
		// As LXD's agent, an image export is relayed as the host answers
		// it, errors included (in the main API's envelope).
		h.relay(w, resp)
		return
	}
	if !isJSON(resp.Header.Get("Content-Type")) {
		h.passThrough(w, resp)
		return
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, upstream.MaxResponse+1))
	if err != nil {
		h.unavailable(w, r, fmt.Errorf("%w: reading answer: %w", upstream.ErrUnreachable, err))
		return
	}
	env, err := devlxdapi.ParseResponse(data)
	if err != nil || len(data) > upstream.MaxResponse {
		h.log().Warn("bad answer from daemon", "method", r.Method, "path", r.URL.Path, "status", resp.StatusCode, "err", err)
		http.Error(w, "Bad Gateway: invalid answer from the host", http.StatusBadGateway)
		return
	}
	if r.Method == http.MethodPatch && r.URL.Path == "/1.0" && env.Type == devlxdapi.TypeSync && h.OnDeclared != nil {
		var put devlxdapi.StatePut
		if json.Unmarshal(body, &put) == nil && (put.State == devlxdapi.StateReady || put.State == devlxdapi.StateStarted || put.State == devlxdapi.StateDegraded) {
			h.OnDeclared(put)
		}
	}
	if etag := resp.Header.Get("Etag"); etag != "" && env.Type == devlxdapi.TypeSync {
		// The trusted routes' ETag, for the guest's If-Match.
		w.Header().Set("Etag", etag)
	}
	devlxdapi.WriteGuest(w, r.URL.Path, env)
}

// isJSON reports whether a Content-Type is application/json, as
// mime.ParseMediaType reads it; the daemon's exact value is checked first,
// without the map ParseMediaType allocates for every answer.
func isJSON(ct string) bool {
	if ct == "application/json" {
		return true
	}
	mt, _, _ := mime.ParseMediaType(ct)
	return mt == "application/json"
}

// roundTrip sends the request to the daemon; GET /1.0/meta-data is tried
// up to MetaDataAttempts times while the daemon cannot be reached (not after
// a timeout: the daemon was reached but did not answer).
func (h *Handler) roundTrip(r *http.Request, path string, body []byte) (*http.Response, error) {
	attempts := 1
	if r.Method == http.MethodGet && r.URL.Path == "/1.0/meta-data" {
		attempts = MetaDataAttempts
	}
	wait := MetaDataRetryWait
	if h.RetryWait > 0 {
		wait = h.RetryWait
	}
	for i := 1; ; i++ {
		resp, err := h.Upstream.RawHeader(r.Context(), r.Method, path, body, upstream.Header{Authorization: r.Header.Get("Authorization"), IfMatch: r.Header.Get("If-Match")})
		if err == nil || i >= attempts || errors.Is(err, context.DeadlineExceeded) ||
			!(errors.Is(err, upstream.ErrNoAdvertisement) || errors.Is(err, upstream.ErrUnreachable)) {
			return resp, err
		}
		t := time.NewTimer(wait)
		select {
		case <-r.Context().Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// relay copies the daemon's answer to the guest unchanged: status, the
// headers of a file answer and of an API error (nosniff), body.
func (h *Handler) relay(w http.ResponseWriter, resp *http.Response) {
	for _, k := range []string{"Content-Type", "Content-Length", "Content-Disposition", "Last-Modified", "X-Content-Type-Options"} {
		if v := resp.Header.Get(k); v != "" {
			w.Header().Set(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// passThrough copies an answer that is not an envelope (an image export, or
// a plain-text error from the daemon's edge) to the guest.
func (h *Handler) passThrough(w http.ResponseWriter, resp *http.Response) {
	if resp.StatusCode >= 400 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		text := strings.TrimSpace(string(msg))
		if text == "" {
			text = http.StatusText(resp.StatusCode)
		}
		http.Error(w, text, resp.StatusCode)
		return
	}
	for _, k := range []string{"Content-Type", "Content-Length", "Content-Disposition"} {
		if v := resp.Header.Get(k); v != "" {
			w.Header().Set(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// unavailable answers a request the daemon could not answer as LXD's agent
// does: 500 "Failed connecting to devLXD over vsock: <why>" (cloud-init's
// LXD datasource retries on 500 only). <why> is the kind of failure only,
// "no daemon advertised yet" or "daemon unreachable": the error itself
// (logged) can name host paths (a hybrid link's socket) and addresses the
// guest has no business seeing.
func (h *Handler) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the guest went away; nothing to answer
	}
	if !errors.Is(err, upstream.ErrNoAdvertisement) {
		h.log().Warn("daemon unreachable", "method", r.Method, "path", r.URL.Path, "err", err)
		if h.OnUnreachable != nil {
			h.OnUnreachable(err)
		}
	}
	why := upstream.ErrUnreachable.Error()
	if errors.Is(err, upstream.ErrNoAdvertisement) {
		why = upstream.ErrNoAdvertisement.Error()
	}
	http.Error(w, unreachablePrefix+why, http.StatusInternalServerError)
}

// parseTypes returns the event types of ?type= (config and device when
// empty). As LXD, unknown types are accepted: they never match an event.
func parseTypes(r *http.Request) []string {
	raw := r.URL.Query().Get("type")
	if raw == "" {
		return []string{devlxdapi.EventConfig, devlxdapi.EventDevice}
	}
	return strings.Split(raw, ",")
}

// encodeEvent returns e as one line of JSON (newline included), encoded as
// LXD does (encoding/json's defaults, so <, > and & are escaped: the same
// value once decoded).
func encodeEvent(e devlxdapi.Event) ([]byte, error) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(e); err != nil {
		return nil, fmt.Errorf("encoding %s event: %w", e.Type, err)
	}
	return buf.Bytes(), nil
}

var upgrader = websocket.Upgrader{
	HandshakeTimeout: 5 * time.Second,
	CheckOrigin:      func(*http.Request) bool { return true }, // local Unix socket
}

// streamHeader is what LXD writes before a raw event stream: a bare
// HTTP/1.1 status line and headers (LF line ends, no Content-Length, no
// chunking); then one JSON event per line until either side closes.
const streamHeader = "HTTP/1.1 200 OK\nConnection: keep-alive\nContent-Type: application/json\nX-Content-Type-Options: nosniff\n\n"

func (h *Handler) serveEvents(w http.ResponseWriter, r *http.Request) {
	types := parseTypes(r)
	if r.Header.Get("Upgrade") == "websocket" {
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Time{})
		_ = rc.SetWriteDeadline(time.Time{})
		h.serveWebsocket(w, r, types)
		return
	}
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "Internal Server Error", http.StatusInternalServerError)
		return
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Time{})
	sub := h.Events.Subscribe(types)
	defer sub.Close()
	if _, err := io.WriteString(conn, streamHeader); err != nil {
		return
	}
	// The guest sends nothing more: a read ends when it closes.
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		_, _ = io.Copy(io.Discard, buf)
	}()
	for {
		select {
		case <-gone:
			return
		case e, ok := <-sub.Events():
			if !ok {
				return
			}
			line, err := encodeEvent(e)
			if err != nil {
				continue
			}
			_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := conn.Write(line); err != nil {
				return
			}
		}
	}
}

func (h *Handler) serveWebsocket(w http.ResponseWriter, r *http.Request, types []string) {
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered the client
	}
	defer conn.Close()
	sub := h.Events.Subscribe(types)
	defer sub.Close()

	// The reader only handles control frames; it ends on close or when no
	// pong arrived within PongWait.
	pingPeriod, pongWait := PingPeriod, PongWait
	if h.PingPeriod > 0 {
		pingPeriod = h.PingPeriod
	}
	if h.PongWait > 0 {
		pongWait = h.PongWait
	}
	readDone := make(chan struct{})
	_ = conn.SetReadDeadline(time.Now().Add(pongWait))
	conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(pongWait)) })
	go func() {
		defer close(readDone)
		for {
			if _, _, err := conn.NextReader(); err != nil {
				return
			}
		}
	}()
	ping := time.NewTicker(pingPeriod)
	defer ping.Stop()
	for {
		select {
		case <-readDone:
			return
		case <-ping.C:
			if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(5*time.Second)); err != nil {
				return
			}
		case e, ok := <-sub.Events():
			if !ok {
				_ = conn.WriteControl(websocket.CloseMessage,
					websocket.FormatCloseMessage(websocket.CloseGoingAway, "agent stopping events"), time.Now().Add(time.Second))
				return
			}
			msg, err := encodeEvent(e)
			if err != nil {
				continue
			}
			// One event per text message, with the newline LXD's
			// WriteJSON leaves in it.
			_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if err := conn.WriteMessage(websocket.TextMessage, msg); err != nil {
				return
			}
		}
	}
}

// Server runs the handler on a Unix socket and can be stopped and started
// again as the daemon enables or disables devlxd.
type Server struct {
	// Path is the socket path (<root>/dev/lxd/sock).
	Path string
	// Handler serves the requests.
	Handler *Handler

	mu  sync.Mutex
	srv *http.Server
	wg  sync.WaitGroup
}

// Running reports whether the socket is being served.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv != nil
}

// Start creates the socket directory (0755) and the socket (0600) and serves
// it. Starting a running server does nothing. A stale socket file is
// replaced.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return nil
	}
	dir := filepath.Dir(s.Path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating devlxd directory %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("setting mode of devlxd directory %s: %w", dir, err)
	}
	if err := os.Remove(s.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing stale devlxd socket %s: %w", s.Path, err)
	}
	ln, err := unixsock.Listen(s.Path, 0o600)
	if err != nil {
		return fmt.Errorf("listening on devlxd socket: %w", err)
	}
	s.Handler.Events.Reopen()
	srv := &http.Server{
		Handler:           s.Handler,
		ReadHeaderTimeout: ReadHeaderTimeout,
		IdleTimeout:       IdleTimeout,
		ErrorLog:          nil,
	}
	s.srv = srv
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = srv.Serve(ln)
	}()
	return nil
}

// Stop closes the socket (removing the file), ends event streams and waits
// up to ctx for requests in flight. Stopping a stopped server does nothing.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil {
		return nil
	}
	srv := s.srv
	s.srv = nil
	s.Handler.Events.Close()
	err := srv.Shutdown(ctx)
	if err != nil {
		_ = srv.Close()
	}
	s.wg.Wait()
	_ = os.Remove(s.Path)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("stopping devlxd socket %s: %w", s.Path, err)
	}
	return nil
}
