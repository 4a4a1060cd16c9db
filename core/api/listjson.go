package api

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/guestlink/guestlink/core/api/wire"
	"github.com/guestlink/guestlink/core/instance"
)

// listEncoder writes the answer of GET /1.0/instances, byte for byte what
// encoding/json makes of wire.Sync([]wire.Instance{...}), about 3× faster:
// the fields are written in order without reflection and map keys are sorted
// with one reused slice.
type listEncoder struct {
	b    []byte
	n    int
	keys []kv // scratch space for sorting map entries
}

// kv is one map entry being sorted.
type kv struct{ k, v string }

// newListEncoder starts an answer in a buffer sized for about n instances.
func newListEncoder(n int) *listEncoder {
	e := &listEncoder{b: make([]byte, 0, 512*n+128)}
	e.b = append(e.b, `{"type":"sync","status":"Success","status_code":200,"operation":"","error_code":0,"error":"","metadata":[`...)
	return e
}

// add appends one instance.
func (e *listEncoder) add(inst *instance.Instance) error {
	if e.n > 0 {
		e.b = append(e.b, ',')
	}
	b, keys, err := appendInstance(e.b, inst, e.keys)
	if err != nil {
		return fmt.Errorf("encoding instance %q: %w", inst.Name, err)
	}
	e.b, e.keys = b, keys
	e.n++
	return nil
}

// bytes ends the answer and returns it.
func (e *listEncoder) bytes() []byte { return append(e.b, "]}"...) }

// appendInstanceList returns the answer listing list.
func appendInstanceList(list []*instance.Instance) ([]byte, error) {
	e := newListEncoder(len(list))
	for _, inst := range list {
		if err := e.add(inst); err != nil {
			return nil, err
		}
	}
	return e.bytes(), nil
}

// appendInstance appends inst as encoding/json encodes wire.Instance (with
// no timeline). keys is scratch space for sorting map keys.
func appendInstance(b []byte, inst *instance.Instance, keys []kv) ([]byte, []kv, error) {
	var err error
	b = append(b, `{"name":`...)
	b = appendJSONString(b, inst.Name)
	b = append(b, `,"uuid":`...)
	b = appendJSONString(b, inst.UUID)
	b = append(b, `,"backend":`...)
	b = appendJSONString(b, inst.Backend)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, inst.Status)
	b = append(b, `,"status_code":`...)
	b = strconv.AppendInt(b, int64(inst.StatusCode), 10)
	b = append(b, `,"config":`...)
	b, keys = appendStringMap(b, inst.Config, keys)
	b = append(b, `,"devices":`...)
	if inst.Devices == nil {
		b = append(b, "null"...)
	} else {
		devs := make([]string, 0, len(inst.Devices))
		for k := range inst.Devices {
			devs = append(devs, k)
		}
		slices.Sort(devs)
		b = append(b, '{')
		for i, k := range devs {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			b, keys = appendStringMap(b, inst.Devices[k], keys)
		}
		b = append(b, '}')
	}
	b = append(b, `,"boot":`...)
	b = strconv.AppendInt(b, inst.Boot, 10)
	b = append(b, `,"created_at":`...)
	if b, err = appendJSONTime(b, &inst.CreatedAt); err != nil {
		return nil, nil, err
	}
	b = append(b, `,"started_at":`...)
	if b, err = appendJSONTime(b, inst.StartedAt); err != nil {
		return nil, nil, err
	}
	b = append(b, `,"ready_at":`...)
	if b, err = appendJSONTime(b, inst.ReadyAt); err != nil {
		return nil, nil, err
	}
	b = append(b, `,"link":`...)
	b = appendJSONString(b, inst.Link)
	b = append(b, `,"agent":{"state":`...)
	b = appendJSONString(b, string(inst.Agent.State))
	b = append(b, `,"last_heartbeat":`...)
	if b, err = appendJSONTime(b, inst.Agent.LastHeartbeat); err != nil {
		return nil, nil, err
	}
	b = append(b, `,"since":`...)
	if b, err = appendJSONTime(b, inst.Agent.Since); err != nil {
		return nil, nil, err
	}
	b = append(b, '}')
	if inst.DevlxdSocket != "" {
		b = append(b, `,"devlxd_socket":`...)
		b = appendJSONString(b, inst.DevlxdSocket)
	}
	if len(inst.Details) > 0 {
		b = append(b, `,"details":`...)
		b, keys = appendStringMap(b, inst.Details, keys)
	}
	return append(b, '}'), keys, nil
}

// appendStringMap appends m with its keys sorted, as encoding/json does.
func appendStringMap(b []byte, m map[string]string, entries []kv) ([]byte, []kv) {
	if m == nil {
		return append(b, "null"...), entries
	}
	entries = entries[:0]
	for k, v := range m {
		entries = append(entries, kv{k, v})
	}
	slices.SortFunc(entries, func(a, b kv) int { return strings.Compare(a.k, b.k) })
	b = append(b, '{')
	for i, e := range entries {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, e.k)
		b = append(b, ':')
		b = appendJSONString(b, e.v)
	}
	return append(b, '}'), entries
}

// appendJSONTime appends t as time.Time.MarshalJSON does (null for nil).
func appendJSONTime(b []byte, t *time.Time) ([]byte, error) {
	if t == nil {
		return append(b, "null"...), nil
	}
	if y := t.Year(); y < 0 || y > 9999 {
		_, err := json.Marshal(t) // the exact error encoding/json gives
		return nil, err
	}
	b = append(b, '"')
	b, err := t.AppendText(b)
	if err != nil {
		return nil, err
	}
	return append(b, '"'), nil
}

// jsonSafe tells the ASCII characters encoding/json writes as they are.
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for c := range t {
		t[c] = c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// appendJSONString appends s quoted as encoding/json does by default: HTML
// characters, control characters, U+2028 and U+2029 escaped, invalid UTF-8
// replaced by U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if jsonSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// The encoder above writes wire.Instance by hand: these conversions stop
// the build when a field is added, removed, renamed or retyped (tags are
// checked by the tests, against encoding/json).
var (
	_ = struct {
		instance.Instance
		Timeline []instance.TimelineEntry
	}(wire.Instance{})
	_ = struct {
		Name, UUID, Backend, Status string
		StatusCode                  int
		Config                      map[string]string
		Devices                     map[string]map[string]string
		Boot                        int64
		CreatedAt                   time.Time
		StartedAt, ReadyAt          *time.Time
		Link                        string
		Agent                       instance.AgentInfo
		DevlxdSocket                string
		Details                     map[string]string
	}(instance.Instance{})
	_ = struct {
		State                instance.AgentState
		LastHeartbeat, Since *time.Time
	}(instance.AgentInfo{})
)
