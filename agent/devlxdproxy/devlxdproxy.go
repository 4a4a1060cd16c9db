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
)

// Upstream is the daemon as the proxy needs it.
type Upstream interface {
	// Raw sends a request to the daemon and returns its HTTP response.
	// Errors wrap upstream.ErrNoAdvertisement or upstream.ErrUnreachable.
	Raw(ctx context.Context, method, path string, body []byte) (*http.Response, error)
	// RawAuth is Raw forwarding the guest's Authorization header (a devlxd
	// bearer token; "" for none), so the daemon can authenticate it.
	RawAuth(ctx context.Context, method, path string, body []byte, authorization string) (*http.Response, error)
}

var _ Upstream = (*upstream.Client)(nil)

// Handler is the http.Handler of /dev/lxd/sock.
type Handler struct {
	// Upstream is the daemon.
	Upstream Upstream
	// Events is the hub GET /1.0/events subscribes to.
	Events *eventhub.Hub
	// OnDeclared, if set, is called with "Ready" or "Started" after the
	// daemon accepted a PATCH /1.0 from the guest.
	OnDeclared func(state string)
	// OnUnreachable, if set, is called when the daemon could not be reached.
	OnUnreachable func(err error)
	// OnReached, if set, is called when the daemon answered.
	OnReached func()
	// Log receives request failures; nil discards them.
	Log *slog.Logger
	// PingPeriod and PongWait override the websocket keep-alive (for
	// tests); zero means the package defaults.
	PingPeriod, PongWait time.Duration
}

var _ http.Handler = (*Handler)(nil)

func (h *Handler) log() *slog.Logger {
	if h.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Log
}

// ServeHTTP serves one guest request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/1.0/events" && r.Method == http.MethodGet {
		h.serveEvents(w, r)
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
	resp, err := h.Upstream.RawAuth(r.Context(), r.Method, path, body, r.Header.Get("Authorization"))
	if err != nil {
		h.unavailable(w, r, err)
		return
	}
	defer resp.Body.Close()
	if h.OnReached != nil {
		h.OnReached()
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if ct != "application/json" {
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
		if json.Unmarshal(body, &put) == nil && (put.State == devlxdapi.StateReady || put.State == devlxdapi.StateStarted) {
			h.OnDeclared(put.State)
		}
	}
	devlxdapi.WriteGuest(w, r.URL.Path, env)
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

func (h *Handler) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, upstream.ErrNoAdvertisement):
		http.Error(w, "Service Unavailable: the host has not connected to the agent yet", http.StatusServiceUnavailable)
	case r.Context().Err() != nil:
		// The guest went away; nothing to answer.
	case errors.Is(err, context.DeadlineExceeded):
		h.log().Warn("daemon did not answer in time", "method", r.Method, "path", r.URL.Path, "err", err)
		if h.OnUnreachable != nil {
			h.OnUnreachable(err)
		}
		http.Error(w, "Gateway Timeout: the host did not answer in time", http.StatusGatewayTimeout)
	default:
		h.log().Warn("daemon unreachable", "method", r.Method, "path", r.URL.Path, "err", err)
		if h.OnUnreachable != nil {
			h.OnUnreachable(err)
		}
		http.Error(w, "Service Unavailable: the host is not reachable", http.StatusServiceUnavailable)
	}
}

// parseTypes returns the event types of ?type= (both when empty), or the
// first invalid entry.
func parseTypes(r *http.Request) (types []string, invalid string, ok bool) {
	raw := r.URL.Query().Get("type")
	if raw == "" {
		return []string{devlxdapi.EventConfig, devlxdapi.EventDevice}, "", true
	}
	for _, t := range strings.Split(raw, ",") {
		if !devlxdapi.ValidEventType(t) {
			return nil, t, false
		}
		types = append(types, t)
	}
	return types, "", true
}

// encodeEvent returns e as one line of JSON (newline included), without
// HTML escaping so that config values reach the guest unchanged.
func encodeEvent(e devlxdapi.Event) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return nil, fmt.Errorf("encoding %s event: %w", e.Type, err)
	}
	return buf.Bytes(), nil
}

var upgrader = websocket.Upgrader{
	HandshakeTimeout: 5 * time.Second,
	CheckOrigin:      func(*http.Request) bool { return true }, // local Unix socket
}

func (h *Handler) serveEvents(w http.ResponseWriter, r *http.Request) {
	types, invalid, ok := parseTypes(r)
	if !ok {
		http.Error(w, fmt.Sprintf("Invalid event type %q", invalid), http.StatusBadRequest)
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	if websocket.IsWebSocketUpgrade(r) {
		h.serveWebsocket(w, r, types)
		return
	}
	sub := h.Events.Subscribe(types)
	defer sub.Close()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case e, ok := <-sub.Events():
			if !ok {
				return
			}
			line, err := encodeEvent(e)
			if err != nil {
				continue
			}
			if _, err := w.Write(line); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
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
			_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if err := conn.WriteMessage(websocket.TextMessage, bytes.TrimSuffix(msg, []byte("\n"))); err != nil {
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
