package client

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/guestlink/guestlink/core/api/wire"
	"github.com/guestlink/guestlink/core/instance"
)

// listParser decodes the answer of GET /1.0/instances by hand, about 3×
// faster than encoding/json at 10,000 instances. It knows exactly the
// documents the daemon writes (its field names, in any order): anything else
// (an unknown or differently cased key, a timeline, a number that is not an
// integer, malformed JSON) makes it give up, and the caller decodes the body
// with encoding/json instead, so the result is always encoding/json's.
type listParser struct {
	data []byte
	i    int
	// strs interns the strings that repeat from instance to instance (map
	// keys, short values, status, backend): one allocation each per answer.
	strs map[string]string
}

// maxInterned bounds the strings interned per answer.
const maxInterned = 4096

// decodeInstanceList parses a sync answer listing instances. ok is false
// when the parser gave up (see listParser) or the answer is an error
// envelope.
func decodeInstanceList(data []byte) (list []wire.Instance, ok bool) {
	p := &listParser{data: data, strs: map[string]string{}}
	if !p.consume('{') {
		return nil, false
	}
	seen := map[string]bool{}
	for first := true; ; first = false {
		if p.consume('}') {
			break
		}
		if !first && !p.consume(',') {
			return nil, false
		}
		key, ok := p.key()
		if !ok || seen[key] {
			return nil, false
		}
		seen[key] = true
		switch key {
		case "type":
			typ, ok := p.str()
			if !ok || typ != wire.TypeSync {
				return nil, false
			}
		case "status", "operation", "error":
			if _, ok := p.str(); !ok {
				return nil, false
			}
		case "status_code", "error_code":
			if _, ok := p.int(); !ok {
				return nil, false
			}
		case "metadata":
			if list, ok = p.instances(); !ok {
				return nil, false
			}
		default:
			return nil, false
		}
	}
	p.ws()
	return list, p.i == len(p.data) && seen["type"]
}

func (p *listParser) ws() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// consume skips white space and c, if c comes next.
func (p *listParser) consume(c byte) bool {
	p.ws()
	if p.i < len(p.data) && p.data[p.i] == c {
		p.i++
		return true
	}
	return false
}

// null consumes a null literal, if one comes next.
func (p *listParser) null() bool {
	p.ws()
	if len(p.data)-p.i >= 4 && string(p.data[p.i:p.i+4]) == "null" {
		p.i += 4
		return true
	}
	return false
}

// key reads an object key and its colon.
func (p *listParser) key() (string, bool) {
	k, ok := p.interned()
	return k, ok && p.consume(':')
}

// interned reads a string that is likely to repeat in other instances.
func (p *listParser) interned() (string, bool) {
	tok, plain, ok := p.raw()
	if !ok || !plain {
		p.i -= len(tok)
		return p.str()
	}
	b := tok[1 : len(tok)-1]
	if s, ok := p.strs[string(b)]; ok {
		return s, true
	}
	s := string(b)
	if len(p.strs) < maxInterned && len(s) <= 64 {
		p.strs[s] = s
	}
	return s, true
}

// raw returns the next string token, quotes included, and whether it is
// plain (no escapes, no control characters, valid UTF-8).
func (p *listParser) raw() (tok []byte, plain, ok bool) {
	p.ws()
	if p.i >= len(p.data) || p.data[p.i] != '"' {
		return nil, false, false
	}
	start := p.i
	plain, ascii := true, true
	for j := p.i + 1; j < len(p.data); j++ {
		switch c := p.data[j]; {
		case c == '"':
			p.i = j + 1
			tok = p.data[start:p.i]
			if !ascii && plain && !utf8.Valid(tok) {
				plain = false
			}
			return tok, plain, true
		case c == '\\':
			plain = false
			j++ // the escaped character cannot end the string
		case c < 0x20:
			return nil, false, false // invalid JSON: let encoding/json say so
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false, false
}

// str reads a string; escapes and invalid UTF-8 are left to encoding/json
// but for the escapes of ASCII characters.
func (p *listParser) str() (string, bool) {
	tok, plain, ok := p.raw()
	if !ok {
		return "", false
	}
	if plain {
		return string(tok[1 : len(tok)-1]), true
	}
	if s, ok := unescapeASCII(tok[1 : len(tok)-1]); ok {
		return s, true
	}
	var s string
	if err := json.Unmarshal(tok, &s); err != nil {
		return "", false
	}
	return s, true
}

// int reads an integer.
func (p *listParser) int() (int64, bool) {
	p.ws()
	j := p.i
	if j < len(p.data) && p.data[j] == '-' {
		j++
	}
	digits := j
	for j < len(p.data) && p.data[j] >= '0' && p.data[j] <= '9' {
		j++
	}
	if j-digits > 1 && p.data[digits] == '0' {
		return 0, false // a leading zero is not JSON
	}
	n, err := strconv.ParseInt(string(p.data[p.i:j]), 10, 64)
	if err != nil || j < len(p.data) && (p.data[j] == '.' || p.data[j] == 'e' || p.data[j] == 'E') {
		return 0, false
	}
	p.i = j
	return n, true
}

// time reads a timestamp as time.Time.UnmarshalJSON does.
func (p *listParser) time(t *time.Time) bool {
	tok, plain, ok := p.raw()
	return ok && plain && t.UnmarshalText(tok[1:len(tok)-1]) == nil
}

// timePtr reads a timestamp or null.
func (p *listParser) timePtr() (*time.Time, bool) {
	if p.null() {
		return nil, true
	}
	t := new(time.Time)
	return t, p.time(t)
}

// stringMap reads an object of strings, or null.
func (p *listParser) stringMap() (map[string]string, bool) {
	return parseObject(p, p.interned)
}

// parseObject reads a JSON object (or null) whose values value reads; a
// duplicate key makes the parser give up, as everything unusual does.
func parseObject[V any](p *listParser, value func() (V, bool)) (map[string]V, bool) {
	if p.null() {
		return nil, true
	}
	if !p.consume('{') {
		return nil, false
	}
	m := map[string]V{}
	for first := true; ; first = false {
		if p.consume('}') {
			return m, true
		}
		if !first && !p.consume(',') {
			return nil, false
		}
		k, ok := p.key()
		if !ok {
			return nil, false
		}
		if _, dup := m[k]; dup {
			return nil, false
		}
		if m[k], ok = value(); !ok {
			return nil, false
		}
	}
}

// instances reads the metadata: an array of instances, or null.
func (p *listParser) instances() ([]wire.Instance, bool) {
	if p.null() {
		return nil, true
	}
	if !p.consume('[') {
		return nil, false
	}
	// Chunks, then one copy into a list of the exact length: no regrowing
	// of a list of large structs.
	var chunks [][]wire.Instance
	chunk := make([]wire.Instance, 0, 64)
	total := 0
	for first := true; ; first = false {
		if p.consume(']') {
			break
		}
		if !first && !p.consume(',') {
			return nil, false
		}
		if len(chunk) == cap(chunk) {
			chunks = append(chunks, chunk)
			chunk = make([]wire.Instance, 0, min(2*cap(chunk), 4096))
		}
		chunk = append(chunk, wire.Instance{})
		total++
		if !p.instance(&chunk[len(chunk)-1].Instance) {
			return nil, false
		}
	}
	if len(chunks) == 0 {
		return chunk, true
	}
	list := make([]wire.Instance, 0, total)
	for _, c := range append(chunks, chunk) {
		list = append(list, c...)
	}
	return list, true
}

// instance reads one instance object into inst.
func (p *listParser) instance(inst *instance.Instance) bool {
	if !p.consume('{') {
		return false
	}
	var seen uint32
	for first := true; ; first = false {
		if p.consume('}') {
			return true
		}
		if !first && !p.consume(',') {
			return false
		}
		key, ok := p.key()
		if !ok {
			return false
		}
		bit, ok := instanceKeys[key]
		if !ok || seen&bit != 0 {
			return false // unknown or repeated key: encoding/json decides
		}
		seen |= bit
		var n int64
		switch key {
		case "name":
			inst.Name, ok = p.str()
		case "uuid":
			inst.UUID, ok = p.str()
		case "backend":
			inst.Backend, ok = p.interned()
		case "status":
			inst.Status, ok = p.interned()
		case "status_code":
			n, ok = p.int()
			inst.StatusCode = int(n)
			ok = ok && int64(inst.StatusCode) == n
		case "config":
			inst.Config, ok = p.stringMap()
		case "devices":
			inst.Devices, ok = p.devices()
		case "boot":
			inst.Boot, ok = p.int()
		case "created_at":
			ok = p.time(&inst.CreatedAt)
		case "started_at":
			inst.StartedAt, ok = p.timePtr()
		case "ready_at":
			inst.ReadyAt, ok = p.timePtr()
		case "link":
			inst.Link, ok = p.interned()
		case "agent":
			ok = p.agent(&inst.Agent)
		case "devlxd_socket":
			inst.DevlxdSocket, ok = p.str()
		case "details":
			inst.Details, ok = p.stringMap()
		}
		if !ok {
			return false
		}
	}
}

// instanceKeys are the keys of an instance the parser reads, each with a bit
// of the set of keys seen.
var instanceKeys = map[string]uint32{
	"name": 1 << 0, "uuid": 1 << 1, "backend": 1 << 2, "status": 1 << 3, "status_code": 1 << 4,
	"config": 1 << 5, "devices": 1 << 6, "boot": 1 << 7, "created_at": 1 << 8, "started_at": 1 << 9,
	"ready_at": 1 << 10, "link": 1 << 11, "agent": 1 << 12, "devlxd_socket": 1 << 13, "details": 1 << 14,
}

// devices reads the devices object, or null.
func (p *listParser) devices() (map[string]map[string]string, bool) {
	return parseObject(p, p.stringMap)
}

// agent reads the agent object.
func (p *listParser) agent(a *instance.AgentInfo) bool {
	if !p.consume('{') {
		return false
	}
	var seen [3]bool
	for first := true; ; first = false {
		if p.consume('}') {
			return true
		}
		if !first && !p.consume(',') {
			return false
		}
		key, ok := p.key()
		if !ok {
			return false
		}
		var s string
		switch key {
		case "state":
			if seen[0] {
				return false
			}
			seen[0] = true
			s, ok = p.interned()
			a.State = instance.AgentState(s)
		case "last_heartbeat":
			if seen[1] {
				return false
			}
			seen[1] = true
			a.LastHeartbeat, ok = p.timePtr()
		case "since":
			if seen[2] {
				return false
			}
			seen[2] = true
			a.Since, ok = p.timePtr()
		default:
			return false
		}
		if !ok {
			return false
		}
	}
}

// unescapeASCII unquotes a string's body whose escapes all stand for ASCII
// characters (as the daemon writes <, > and &) and whose other bytes are
// valid UTF-8; ok is false for anything else.
func unescapeASCII(b []byte) (string, bool) {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		if i+1 >= len(b) {
			return "", false
		}
		i++
		switch b[i] {
		case '"', '\\', '/':
			out = append(out, b[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			if i+4 >= len(b) {
				return "", false
			}
			v, err := strconv.ParseUint(string(b[i+1:i+5]), 16, 16)
			if err != nil || v >= utf8.RuneSelf {
				return "", false
			}
			out = append(out, byte(v))
			i += 4
		default:
			return "", false
		}
	}
	if !utf8.Valid(out) {
		return "", false
	}
	return string(out), true
}
