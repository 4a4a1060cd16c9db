// Package control serves the agent's link port (8443): the daemon's
// advertisement (PUT /1.0), guest events (POST /1.0/events), the agent's
// info (GET /1.0), the guest's files (/1.0/files, files.go), state
// (GET /1.0/state, state.go) and filesystem freeze (POST /1.0/freeze and
// /1.0/thaw, freeze.go), over TLS that accepts only the daemon's client
// certificate. Answers use the LXD envelope.
package control

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/guestlink/guestlink/agent/files"
	"github.com/guestlink/guestlink/link/advert"
	"github.com/guestlink/guestlink/link/devlxdapi"
)

// Port is the link port the agent listens on.
const Port = 8443

// MaxEventBody is the largest POST /1.0/events body, in bytes.
const MaxEventBody = 1 << 20

// ErrUnreachable is wrapped by Agent.Advertise when the advertised daemon
// could not be reached; PUT /1.0 then answers 503.
var ErrUnreachable = errors.New("advertised daemon unreachable")

// Agent is what the link port drives.
type Agent interface {
	// Advertise stores and validates an advertisement (reachability
	// check, ring word, devlxd socket). It returns once the advertisement
	// is validated or rejected. With inAnswer (the daemon sent
	// advert.DeclarationHeader) a declaration the new daemon must get back
	// is returned rather than PATCHed; otherwise it is PATCHed before
	// Advertise returns and the result is nil.
	Advertise(ctx context.Context, a *advert.Advertisement, inAnswer bool) (*devlxdapi.StatePut, error)
	// Publish hands a guest event to the local /1.0/events subscribers.
	Publish(e devlxdapi.Event)
	// Info describes the agent.
	Info() devlxdapi.AgentInfo
}

// Handler is the http.Handler of the link port.
type Handler struct {
	// Agent is driven by the requests.
	Agent Agent
	// Exec, if set, serves POST /1.0/exec and /1.0/operations/ (exec.go).
	Exec http.Handler
	// Files serves /1.0/files (files.go); nil answers 501.
	Files *files.FS
	// Features is the guest's feature switch; nil lets every feature
	// through.
	Features FeatureSwitch
	// State serves GET /1.0/state (state.go); nil answers 501.
	State StateCollector
	// Freeze serves POST /1.0/freeze and /1.0/thaw (freeze.go); nil
	// answers 501.
	Freeze Freezer
}

var _ http.Handler = (*Handler)(nil)

func writeEnvelope(w http.ResponseWriter, code int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeEnvelope(w, code, devlxdapi.ErrorResponse(code, msg))
}

func writeSync(w http.ResponseWriter, v any) {
	b, err := devlxdapi.SyncResponse(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeEnvelope(w, http.StatusOK, b)
}

// readBody reads at most limit bytes, answering 413 or 400 itself.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("Request body too large (limit %d bytes)", limit))
		} else {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid request body: %v", err))
		}
		return nil, false
	}
	return b, true
}

// ServeHTTP serves one daemon request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/1.0":
		switch r.Method {
		case http.MethodGet:
			writeSync(w, h.Agent.Info())
		case http.MethodPut:
			h.advertise(w, r)
		default:
			writeError(w, http.StatusMethodNotAllowed, "")
		}
	case "/1.0/events":
		if r.Method != http.MethodPost {
			writeError(w, http.StatusMethodNotAllowed, "")
			return
		}
		h.event(w, r)
	case "/1.0/files":
		h.serveFiles(w, r)
	case "/1.0/state":
		h.serveState(w, r)
	case "/1.0/freeze", "/1.0/thaw":
		h.serveFreeze(w, r, r.URL.Path == "/1.0/thaw")
	default:
		if h.serveExec(w, r) {
			return
		}
		writeError(w, http.StatusNotFound, "")
	}
}

func (h *Handler) advertise(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r, advert.MaxSize)
	if !ok {
		return
	}
	a, err := advert.Parse(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid request body: %v", err))
		return
	}
	inAnswer := r.Header.Get(advert.DeclarationHeader) == "1"
	decl, err := h.Agent.Advertise(r.Context(), a, inAnswer)
	if err != nil {
		if errors.Is(err, ErrUnreachable) {
			writeError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if decl != nil {
		writeSync(w, advert.Answer{Declaration: decl})
		return
	}
	writeSync(w, nil)
}

// ParseEvent decodes and validates a POST /1.0/events body: one event object
// with no unknown fields, a known type, an RFC 3339 timestamp and an object
// as metadata.
func ParseEvent(body []byte) (devlxdapi.Event, error) {
	var e devlxdapi.Event
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return e, fmt.Errorf("decoding event: %w", err)
	}
	if dec.More() {
		return e, errors.New("trailing data after the event")
	}
	if !devlxdapi.ValidEventType(e.Type) {
		return e, fmt.Errorf("unknown event type %q", e.Type)
	}
	if _, err := time.Parse(time.RFC3339Nano, e.Timestamp); err != nil {
		return e, fmt.Errorf("event timestamp %q: %w", e.Timestamp, err)
	}
	meta := bytes.TrimSpace(e.Metadata)
	if len(meta) == 0 || meta[0] != '{' {
		return e, errors.New("event metadata must be a JSON object")
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, meta); err != nil {
		return e, fmt.Errorf("event metadata: %w", err)
	}
	e.Metadata = compact.Bytes()
	return e, nil
}

func (h *Handler) event(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r, MaxEventBody)
	if !ok {
		return
	}
	e, err := ParseEvent(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid request body: %v", err))
		return
	}
	h.Agent.Publish(e)
	writeSync(w, nil)
}

// TLSConfig returns the link port's TLS configuration: the agent presents
// cert and requires a client certificate byte-equal to daemonClientDER (the
// server.crt of the config drive).
func TLSConfig(cert tls.Certificate, daemonClientDER []byte) *tls.Config {
	pinned := bytes.Clone(daemonClientDER)
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAnyClientCert,
		// X25519 alone on the host-local link (docs/security.md).
		CurvePreferences: []tls.CurveID{tls.X25519},
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], pinned) {
				return errors.New("client certificate is not the daemon's")
			}
			return nil
		},
	}
}
