package adminapi

import (
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	gojson "github.com/goccy/go-json"
	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/core/instance"
)

// The forms of GET /1.0/instances (docs/admin-api.md, "Listing
// instances"), as LXD serves them:
//
//   - no recursion, or recursion=0: the instances' URLs,
//     ["/1.0/instances/web1", ...];
//   - recursion=1 (and recursion=2, which in LXD adds the state: the
//     instance object already carries it): the full instance objects;
//   - recursion=1&fields=name,status,...: summary objects holding only the
//     named top-level keys of the instance object, for tables.
//
// A client asks for the form it needs; the URLs and a summary cost a
// fraction of the full objects (BenchmarkInstanceList*).
type listForm int

const (
	listURLs listForm = iota
	listFull
	listSummary
)

// summaryField writes one key of an instance's summary object: its value
// (the key and colon are written by the caller).
type summaryField struct {
	key string
	// omit reports whether the key is left out for inst (the full
	// object's omitempty).
	omit func(inst *instance.Instance) bool
	// value appends the key's JSON value to dst.
	value func(dst []byte, inst *instance.Instance) []byte
}

// summaryFields are the keys a summary may name: every top-level key of
// the instance object (the timeline is not part of a list).
var summaryFields = []summaryField{
	{key: "name", value: func(d []byte, i *instance.Instance) []byte { return appendJSONString(d, i.Name) }},
	{key: "uuid", value: func(d []byte, i *instance.Instance) []byte { return appendJSONString(d, i.UUID) }},
	{key: "backend", value: func(d []byte, i *instance.Instance) []byte { return appendJSONString(d, i.Backend) }},
	{key: "status", value: func(d []byte, i *instance.Instance) []byte { return appendJSONString(d, i.Status) }},
	{key: "status_code", value: func(d []byte, i *instance.Instance) []byte { return strconv.AppendInt(d, int64(i.StatusCode), 10) }},
	{key: "config", value: func(d []byte, i *instance.Instance) []byte { return appendJSONValue(d, i.Config) }},
	{key: "devices", value: func(d []byte, i *instance.Instance) []byte { return appendJSONValue(d, i.Devices) }},
	{key: "boot", value: func(d []byte, i *instance.Instance) []byte { return strconv.AppendInt(d, i.Boot, 10) }},
	{key: "created_at", value: func(d []byte, i *instance.Instance) []byte { return appendJSONTime(d, &i.CreatedAt) }},
	{key: "started_at", value: func(d []byte, i *instance.Instance) []byte { return appendJSONTime(d, i.StartedAt) }},
	{key: "ready_at", value: func(d []byte, i *instance.Instance) []byte { return appendJSONTime(d, i.ReadyAt) }},
	{key: "link", value: func(d []byte, i *instance.Instance) []byte { return appendJSONString(d, i.Link) }},
	{key: "agent", value: appendJSONAgent},
	{key: "devlxd_socket", omit: func(i *instance.Instance) bool { return i.DevlxdSocket == "" },
		value: func(d []byte, i *instance.Instance) []byte { return appendJSONString(d, i.DevlxdSocket) }},
	{key: "details", omit: func(i *instance.Instance) bool { return len(i.Details) == 0 },
		value: func(d []byte, i *instance.Instance) []byte { return appendJSONValue(d, i.Details) }},
	{key: "conditions", value: func(d []byte, i *instance.Instance) []byte {
		return appendJSONValue(d, instance.WireConditions(i.Conditions))
	}},
	{key: "location", value: func(d []byte, i *instance.Instance) []byte { return appendJSONString(d, i.Location) }},
	{key: "status_reason", omit: func(i *instance.Instance) bool { return i.StatusReason == "" },
		value: func(d []byte, i *instance.Instance) []byte { return appendJSONString(d, i.StatusReason) }},
	{key: "profiles", value: func(d []byte, i *instance.Instance) []byte { return appendJSONValue(d, i.Profiles) }},
	// ipv4 is the agent's cached report or the owning member's (API.listIPv4): addSummary
	// writes it from the encoder, so it has no value function here.
	{key: "ipv4"},
}

// summaryFieldNames lists the keys of summaryFields, for error messages.
func summaryFieldNames() string {
	names := make([]string, len(summaryFields))
	for i, f := range summaryFields {
		names[i] = f.key
	}
	return strings.Join(names, ", ")
}

// parseListForm reads ?recursion= and ?fields= of a list request. It
// returns the form and, for a summary, its fields in the instance object's
// order (each once).
func parseListForm(c *fiber.Ctx) (listForm, []summaryField, error) {
	form := listURLs
	switch r := c.Query("recursion"); r {
	case "", "0":
	case "1", "2":
		form = listFull
	default:
		return 0, nil, badRequest("invalid recursion %q: must be 0, 1 or 2", r)
	}
	raw, ok := c.Queries()["fields"]
	if !ok {
		return form, nil, nil
	}
	if form != listFull {
		return 0, nil, badRequest("fields needs recursion=1: the URL list has no fields")
	}
	var want []string
	for name := range strings.SplitSeq(raw, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.ContainsFunc(summaryFields, func(f summaryField) bool { return f.key == name }) {
			return 0, nil, badRequest("invalid field %q: must be one of %s", name, summaryFieldNames())
		}
		want = append(want, name)
	}
	if len(want) == 0 {
		return 0, nil, badRequest("fields is empty: name at least one of %s", summaryFieldNames())
	}
	var fields []summaryField
	for _, f := range summaryFields {
		if slices.Contains(want, f.key) {
			fields = append(fields, f)
		}
	}
	return listSummary, fields, nil
}

// encodeList lists the instances matching filter in form (with fields, for
// a summary) into a new answer. An instance service that keeps a cache slot
// per instance (cachedLister) has each instance's encoding copied from its
// slot, encoded only after the instance changed (list_cache.go); one that
// hands out shared views (instanceLister) has them encoded as they are
// listed: no copies.
func (a *API) encodeList(c *fiber.Ctx, filter instance.ListFilter, form listForm, fields []summaryField) (*listEncoder, error) {
	e := newListEncoder()
	e.ipv4 = a.listIPv4
	add := e.add
	switch form {
	case listURLs:
		add = e.addURL
	case listSummary:
		add = e.addSummary(fields)
	}
	if l, ok := a.cfg.Instances.(cachedLister); ok {
		return e, l.ListCachedFunc(c.UserContext(), filter, e.addRowsFunc(form, fields, a))
	}
	if l, ok := a.cfg.Instances.(instanceLister); ok {
		return e, l.ListFunc(c.UserContext(), filter, add)
	}
	list, err := a.cfg.Instances.List(c.UserContext(), filter)
	if err != nil {
		return nil, err
	}
	for _, inst := range list {
		if err := add(inst); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// addURL appends one instance's URL to a URL list.
func (e *listEncoder) addURL(inst *instance.Instance) error {
	e.addURLName(inst.Name)
	return nil
}

// addURLName appends the URL of the instance name to a URL list.
func (e *listEncoder) addURLName(name string) {
	b := e.scratch[:0]
	if e.n > 0 {
		b = append(b, ',')
	}
	b = append(b, `"/1.0/instances/`...)
	b = appendJSONStringBody(b, name)
	b = append(b, '"')
	e.scratch = b
	_, _ = e.Write(b)
	e.n++
}

// addSummary returns a function appending one instance's summary object
// with fields.
func (e *listEncoder) addSummary(fields []summaryField) func(inst *instance.Instance) error {
	return func(inst *instance.Instance) error {
		b := e.scratch[:0]
		if e.n > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		first := true
		for _, f := range fields {
			if f.omit != nil && f.omit(inst) {
				continue
			}
			var ipv4 string
			if f.key == "ipv4" {
				if e.ipv4 != nil {
					ipv4 = e.ipv4(inst)
				}
				if ipv4 == "" { // omitempty, as in the full object
					continue
				}
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(b, '"')
			b = append(b, f.key...)
			b = append(b, '"', ':')
			if f.value == nil {
				b = appendJSONString(b, ipv4)
			} else {
				b = f.value(b, inst)
			}
		}
		b = append(b, '}')
		e.scratch = b
		_, _ = e.Write(b)
		e.n++
		return nil
	}
}

// appendJSONTime appends t as encoding/json writes a time.Time (RFC 3339
// with nanoseconds, quoted), or null for nil.
func appendJSONTime(dst []byte, t *time.Time) []byte {
	if t == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"')
}

// appendJSONAgent appends the agent part of inst as the full object has it.
func appendJSONAgent(dst []byte, inst *instance.Instance) []byte {
	a := inst.Agent
	dst = append(dst, `{"state":`...)
	dst = appendJSONString(dst, string(a.State))
	dst = append(dst, `,"last_heartbeat":`...)
	dst = appendJSONTime(dst, a.LastHeartbeat)
	dst = append(dst, `,"since":`...)
	dst = appendJSONTime(dst, a.Since)
	return append(dst, '}')
}

// appendJSONValue appends v encoded as the full object encodes it
// (goccy/go-json, encoding/json's bytes); maps and lists only.
func appendJSONValue(dst []byte, v any) []byte {
	b, err := gojson.Marshal(v)
	if err != nil {
		// Maps of strings and lists of plain structs always encode.
		return append(dst, "null"...)
	}
	return append(dst, b...)
}

// appendJSONString appends s as a JSON string, quoted.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendJSONStringBody(dst, s)
	return append(dst, '"')
}

// appendJSONStringBody appends s escaped as encoding/json escapes it
// (including <, > and & and the line separators), without quotes.
func appendJSONStringBody(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(dst, s[start:]...)
}
