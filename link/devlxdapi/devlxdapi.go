// Package devlxdapi holds the devlxd wire types shared by the agent and the
// daemon: the LXD envelope (package api's) spoken between them over the guest
// link, the bodies of GET/PATCH /1.0, the guest events, and the conversion of
// an envelope into the plain format the guest sees on /dev/lxd/sock.
package devlxdapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/guestlink/guestlink/api"
)

// APIVersion is the only devlxd API version.
const APIVersion = "1.0"

// Envelope types.
const (
	// TypeSync is the type of a successful synchronous response.
	TypeSync = api.TypeSync
	// TypeError is the type of an error response.
	TypeError = api.TypeError
)

// Guest-visible states of an instance, used by GET /1.0 and PATCH /1.0.
const (
	// StateReady is the state a guest declares once it is ready.
	StateReady = "Ready"
	// StateStarted is the state of a running instance that is not ready.
	StateStarted = "Started"
	// StateDegraded is guestlink's extension: a guest that runs but is
	// impaired (not Ready; its instance's Degraded condition is True). LXD
	// does not know it; GET /1.0 answers StateStarted for it.
	StateDegraded = "Degraded"
)

// Event types sent to guests on /1.0/events.
const (
	// EventConfig is the type of a user.* config change event.
	EventConfig = "config"
	// EventDevice is the type of a device change event.
	EventDevice = "device"
)

// Device event actions.
const (
	// DeviceAdded is the action of a device that was added.
	DeviceAdded = "added"
	// DeviceRemoved is the action of a device that was removed.
	DeviceRemoved = "removed"
	// DeviceUpdated is the action of a device whose config changed.
	DeviceUpdated = "updated"
)

// ErrInvalidEnvelope is returned when a body is not an LXD envelope.
var ErrInvalidEnvelope = errors.New("invalid devlxd envelope")

// Response is the LXD envelope spoken between the agent and the daemon: the
// one envelope of package api, with its metadata kept raw (the JSON value of
// a success, null on error).
type Response = api.Response[json.RawMessage]

// encode marshals v as JSON without HTML escaping and with a trailing
// newline, like LXD's util.WriteJSON.
func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// SyncResponse returns the success envelope carrying v as its metadata (a nil
// v gives "metadata":null, the answer to PATCH /1.0).
//
// The envelope around the metadata is constant, so it is written as bytes
// around the one encoding of v: the same bytes encoding the whole Response
// gives (TestSyncResponseBytes), without encoding v twice and compacting the
// result again (a devlxd request's largest cost on the daemon's side).
func SyncResponse(v any) ([]byte, error) {
	buf := bytes.NewBuffer(make([]byte, 0, 512))
	buf.WriteString(syncPrefix)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encoding devlxd response metadata: %w", err)
	}
	b := bytes.TrimRight(buf.Bytes(), "\n")
	return append(b, "}\n"...), nil
}

// syncPrefix is the success envelope up to its metadata, as encoding/json
// writes Response's fields in order.
const syncPrefix = `{"type":"` + TypeSync + `","status":"Success","status_code":200,"operation":"","error_code":0,"error":"","metadata":`

// ErrorResponse returns the error envelope for HTTP status code and message
// msg; an empty msg becomes the status text ("Forbidden", "Not Found", ...).
func ErrorResponse(code int, msg string) []byte {
	if msg == "" {
		msg = http.StatusText(code)
	}
	b, err := encode(&Response{Type: TypeError, ErrorCode: code, Error: msg})
	if err != nil {
		// Encoding a struct of strings and ints cannot fail.
		panic(fmt.Sprintf("encoding devlxd error response: %v", err))
	}
	return b
}

// ErrorResponseText is ErrorResponse with msg as it is: an empty msg
// stays empty (the guest then reads an empty error text).
func ErrorResponseText(code int, msg string) []byte {
	b, err := encode(&Response{Type: TypeError, ErrorCode: code, Error: msg})
	if err != nil {
		panic(fmt.Sprintf("encoding devlxd error response: %v", err))
	}
	return b
}

// HeaderInstanceType is the header of the daemon's devlxd answers naming
// the calling guest's instance type (InstanceTypeVM or
// InstanceTypeContainer): the agent answers as LXD's VM agent does only
// for a VM (GET / locally). It is not passed on to the guest.
const HeaderInstanceType = "X-Guestlink-Instance-Type"

// ParseResponse decodes an envelope and checks its type. The HTTP status of
// the transport is not consulted: the envelope carries its own.
func ParseResponse(data []byte) (*Response, error) {
	var r Response
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidEnvelope, err)
	}
	switch r.Type {
	case TypeSync:
		if len(r.Metadata) == 0 {
			r.Metadata = json.RawMessage("null")
		}
	case TypeError:
		if r.ErrorCode < 400 || r.ErrorCode > 599 {
			return nil, fmt.Errorf("%w: error_code %d is not an HTTP error status", ErrInvalidEnvelope, r.ErrorCode)
		}
	default:
		return nil, fmt.Errorf("%w: type %q", ErrInvalidEnvelope, r.Type)
	}
	return &r, nil
}

// Info is the body of GET /1.0.
//
// The fields are in LXD's order: LXD embeds its state struct first, so
// "state" comes before "api_version" (internal/devlxdconf's
// testdata/lxd_types.txt records LXD's order and the suite checks it).
type Info struct {
	// State is StateReady when the instance's ready flag is set, else
	// StateStarted.
	State string `json:"state"`
	// APIVersion is always "1.0".
	APIVersion string `json:"api_version"`
	// InstanceType is InstanceTypeVM or InstanceTypeContainer, as the
	// instance's backend declares.
	InstanceType string `json:"instance_type"`
	// Location is the host name.
	Location string `json:"location"`
	// Auth is always "untrusted".
	Auth string `json:"auth"`
	// SupportedStorageDrivers are the host's storage drivers when the
	// instance may manage volumes (security.devlxd.management.volumes),
	// else empty; never null.
	SupportedStorageDrivers []StorageDriver `json:"supported_storage_drivers"`
}

// StorageDriver is one entry of Info.SupportedStorageDrivers (LXD's
// object).
type StorageDriver struct {
	// Name is the driver's name ("dir").
	Name string `json:"name"`
	// Remote reports whether the driver's volumes live off the host.
	Remote bool `json:"remote"`
}

// MarshalJSON encodes the info with SupportedStorageDrivers as [] when nil.
func (i Info) MarshalJSON() ([]byte, error) {
	type plain Info
	p := plain(i)
	if p.SupportedStorageDrivers == nil {
		p.SupportedStorageDrivers = []StorageDriver{}
	}
	b, err := encode(p)
	return bytes.TrimRight(b, "\n"), err
}

// Instance types of GET /1.0 (LXD's names).
const (
	// InstanceTypeVM is a guest with its own kernel.
	InstanceTypeVM = "virtual-machine"
	// InstanceTypeContainer is a guest sharing the host's kernel.
	InstanceTypeContainer = "container"
)

// NewInfo returns the GET /1.0 body for an untrusted caller; an
// instanceType other than InstanceTypeContainer is InstanceTypeVM.
func NewInfo(ready bool, location, instanceType string) Info {
	if instanceType != InstanceTypeContainer {
		instanceType = InstanceTypeVM
	}
	state := StateStarted
	if ready {
		state = StateReady
	}
	return Info{
		APIVersion:              APIVersion,
		State:                   state,
		InstanceType:            instanceType,
		Location:                location,
		Auth:                    "untrusted",
		SupportedStorageDrivers: []StorageDriver{},
	}
}

// StatePut is the body of PATCH /1.0.
type StatePut struct {
	// State is StateReady, StateStarted or StateDegraded (exact case).
	State string `json:"state"`
	// Reason is guestlink's extension: why (a CamelCase word such as
	// ProbeFailed, at most MaxReasonLen bytes); optional.
	Reason string `json:"reason,omitempty"`
	// Message is guestlink's extension: a human explanation (at most
	// MaxMessageLen bytes of UTF-8); optional.
	Message string `json:"message,omitempty"`
}

// Bounds of StatePut's Reason and Message.
const (
	MaxReasonLen  = 64
	MaxMessageLen = 1024
)

// Check validates a declaration as the daemon accepts it, whichever way it
// came (PATCH /1.0, or the agent's answer to an advertisement): a known
// state, a reason and a message within their rules. Its errors are the
// wire messages devlxd answers with 400.
func (p StatePut) Check() error {
	switch p.State {
	case StateReady, StateStarted, StateDegraded:
	default:
		return fmt.Errorf("Invalid state %q", p.State) //nolint:staticcheck // LXD's wire message.
	}
	if err := checkReason(p.Reason); err != nil {
		return err
	}
	return checkMessage(p.Message)
}

// checkReason accepts "" or a CamelCase word: a letter, then letters and
// digits, at most MaxReasonLen bytes.
func checkReason(r string) error {
	if r == "" {
		return nil
	}
	if len(r) > MaxReasonLen {
		return fmt.Errorf("Invalid reason: longer than %d bytes", MaxReasonLen) //nolint:staticcheck // LXD-style wire message.
	}
	for i, c := range r {
		if c > unicode.MaxASCII || !(unicode.IsLetter(c) || (i > 0 && unicode.IsDigit(c))) {
			return fmt.Errorf("Invalid reason %q: must be a CamelCase word (ASCII letters, then letters and digits)", r) //nolint:staticcheck // LXD-style wire message.
		}
	}
	return nil
}

// checkMessage accepts at most MaxMessageLen bytes of UTF-8
// without control characters other than tab and newline.
func checkMessage(m string) error {
	if len(m) > MaxMessageLen {
		return fmt.Errorf("Invalid message: longer than %d bytes", MaxMessageLen) //nolint:staticcheck // LXD-style wire message.
	}
	if !utf8.ValidString(m) {
		return fmt.Errorf("Invalid message: not UTF-8") //nolint:staticcheck // LXD-style wire message.
	}
	for _, c := range m {
		if unicode.IsControl(c) && c != '\t' && c != '\n' {
			return fmt.Errorf("Invalid message: control character %U", c) //nolint:staticcheck // LXD-style wire message.
		}
	}
	return nil
}

// Event is one message on GET /1.0/events.
type Event struct {
	// Type is EventConfig or EventDevice.
	Type string `json:"type"`
	// Timestamp is the time of the change in RFC 3339 with nanoseconds.
	Timestamp string `json:"timestamp"`
	// Metadata is a ConfigEvent or a DeviceEvent.
	Metadata json.RawMessage `json:"metadata"`
}

// ConfigEvent is the metadata of an EventConfig event.
type ConfigEvent struct {
	// Key is the changed user.* key.
	Key string `json:"key"`
	// OldValue is the value before the change.
	OldValue string `json:"old_value"`
	// Value is the value after the change.
	Value string `json:"value"`
}

// DeviceEvent is the metadata of an EventDevice event.
type DeviceEvent struct {
	// Action is DeviceAdded, DeviceRemoved or DeviceUpdated.
	Action string `json:"action"`
	// Name is the device name.
	Name string `json:"name"`
	// Config is the device config.
	Config map[string]string `json:"config"`
}

// ValidEventType reports whether t is a devlxd event type.
func ValidEventType(t string) bool {
	return t == EventConfig || t == EventDevice
}

// IsRawPath reports whether the guest sees the success answer for path as raw
// text (application/octet-stream) rather than JSON: /1.0/config/<key> and
// /1.0/meta-data.
func IsRawPath(path string) bool {
	if path == "/1.0/meta-data" {
		return true
	}
	key, ok := strings.CutPrefix(path, "/1.0/config/")
	return ok && key != ""
}

// WriteGuest writes env for path in the plain format the guest sees on
// /dev/lxd/sock:
//   - errors: the real status, "msg\n", text/plain; charset=utf-8 (as
//     http.Error; an empty message becomes the status text);
//   - success with null metadata (PATCH /1.0): 200 with an empty body;
//   - success on a raw path (see IsRawPath): the metadata string as-is,
//     application/octet-stream;
//   - any other success: the bare JSON value and a newline, application/json.
//
// A malformed envelope (raw path whose metadata is not a string) is answered
// 502 Bad Gateway.
func WriteGuest(w http.ResponseWriter, path string, env *Response) {
	if env.Type == TypeError {
		code := env.ErrorCode
		if code < 400 || code > 599 {
			code = http.StatusInternalServerError
		}
		// The text as the daemon wrote it: an empty one (LXD's VM agent's
		// 501) stays empty.
		http.Error(w, env.Error, code)
		return
	}
	meta := bytes.TrimSpace(env.Metadata)
	if len(meta) == 0 || bytes.Equal(meta, []byte("null")) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusOK)
		return
	}
	if IsRawPath(path) {
		var s string
		if err := json.Unmarshal(meta, &s); err != nil {
			http.Error(w, "Bad Gateway: daemon answered a non-string value for a raw endpoint", http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(s))
		return
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, meta); err != nil {
		http.Error(w, "Bad Gateway: daemon answered invalid JSON", http.StatusBadGateway)
		return
	}
	buf.WriteByte('\n')
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
}

// AgentInfo is the body of GET /1.0 on the agent's link port (8443), a
// guestlink addition the daemon may use for diagnostics.
type AgentInfo struct {
	// Version is the agent's version.
	Version string `json:"version"`
	// BootID is the guest kernel's boot id.
	BootID string `json:"boot_id"`
	// State is the agent's current ring word ("STARTED", "CONNECTED").
	State string `json:"state"`
	// Devlxd reports whether /dev/lxd/sock is being served.
	Devlxd bool `json:"devlxd"`
	// Features are the agent features the guest's admin leaves on
	// (agent/features: exec, files, state, freeze).
	Features []string `json:"features"`
}
