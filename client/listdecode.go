package client

import (
	"encoding/json"
	"strconv"
	"time"
	"unsafe"

	"github.com/guestlink/guestlink/api"
)

// decodeInstanceList decodes a GET /1.0/instances answer of instance
// objects (full or summaries) into a list, as encoding/json would
// (TestDecodeInstanceListMatchesEncodingJSON), by a parser that knows the
// shape: no reflection, no copy of the input, each string without escapes
// pointing into raw (which the caller never reuses), the times, conditions
// and profiles of all instances in a few shared slabs. It reports false,
// having decided nothing, for anything it does not parse itself (an error
// envelope, a key it does not know or in another case, a repeated key, a
// number that is not a plain integer, malformed JSON): the caller then
// decodes raw the general way, which also gives encoding/json's errors.
//
// At 10,000 running guests (12.5 MiB) goccy/go-json spent most of the
// decode copying the input, in reflection and in map assignment through
// reflect (BenchmarkDecodeRunning10k).
func decodeInstanceList(raw []byte) ([]api.Instance, bool) {
	d := listDecoder{b: raw}
	list, ok := d.envelope()
	if !ok {
		return nil, false
	}
	return list, true
}

// listDecoder is the state of one decodeInstanceList.
type listDecoder struct {
	b []byte
	i int
	// Slabs the instances' pointers and slices are cut from: one
	// allocation per slabSize values, not one per value.
	times    []time.Time
	conds    []api.Condition
	profiles []string
}

// slabSize is how many values a slab holds.
const slabSize = 1024

// plain marks the bytes a JSON string may hold as they are: not a quote,
// a backslash, a control character, or a byte of a multi-byte UTF-8
// sequence (which encoding/json checks, replacing invalid ones).
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// ws skips white space.
func (d *listDecoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, 0 at the end.
func (d *listDecoder) peek() byte {
	d.ws()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

// next consumes c after white space, reporting whether it was there.
func (d *listDecoder) next(c byte) bool {
	if d.peek() != c {
		return false
	}
	d.i++
	return true
}

// null consumes a null, reporting whether one was there.
func (d *listDecoder) null() bool {
	if d.peek() == 'n' && len(d.b)-d.i >= 4 && string(d.b[d.i:d.i+4]) == "null" {
		d.i += 4
		return true
	}
	return false
}

// str reads a string. One without escapes or non-ASCII bytes is not
// copied; another is decoded by encoding/json.
func (d *listDecoder) str() (string, bool) {
	if d.peek() != '"' {
		return "", false
	}
	start := d.i + 1
	i := start
	for i < len(d.b) && plain[d.b[i]] {
		i++
	}
	if i < len(d.b) && d.b[i] == '"' {
		d.i = i + 1
		if i == start {
			return "", true
		}
		return unsafe.String(&d.b[start], i-start), true
	}
	// Escapes or non-ASCII: find the end, let encoding/json decode it.
	for i < len(d.b) {
		switch c := d.b[i]; {
		case c == '"':
			var s string
			if err := json.Unmarshal(d.b[start-1:i+1], &s); err != nil {
				return "", false
			}
			d.i = i + 1
			return s, true
		case c == '\\':
			i += 2
		case c < 0x20:
			return "", false
		default:
			i++
		}
	}
	return "", false
}

// strOrNull reads a string into *dst; null leaves it.
func (d *listDecoder) strOrNull(dst *string) bool {
	if d.null() {
		return true
	}
	s, ok := d.str()
	*dst = s
	return ok
}

// int reads a plain integer (no fraction or exponent) into *dst; null
// leaves it.
func (d *listDecoder) int(dst *int64) bool {
	if d.null() {
		return true
	}
	d.ws()
	start, i := d.i, d.i
	if i < len(d.b) && d.b[i] == '-' {
		i++
	}
	digits := i
	for i < len(d.b) && d.b[i] >= '0' && d.b[i] <= '9' {
		i++
	}
	if i == digits || (d.b[digits] == '0' && i > digits+1) {
		return false
	}
	if i < len(d.b) && (d.b[i] == '.' || d.b[i] == 'e' || d.b[i] == 'E') {
		return false
	}
	n, err := strconv.ParseInt(unsafe.String(&d.b[start], i-start), 10, 64)
	if err != nil {
		return false
	}
	*dst = n
	d.i = i
	return true
}

// time reads a time into *dst as time.Time.UnmarshalJSON does; null
// leaves it.
func (d *listDecoder) time(dst *time.Time) bool {
	if d.null() {
		return true
	}
	if d.peek() != '"' {
		return false
	}
	start := d.i
	end := start + 1
	for end < len(d.b) && plain[d.b[end]] {
		end++
	}
	if end >= len(d.b) || d.b[end] != '"' {
		return false
	}
	if t, ok := parseUTC(d.b[start+1 : end]); ok {
		*dst = t
	} else if err := dst.UnmarshalJSON(d.b[start : end+1]); err != nil {
		return false
	}
	d.i = end + 1
	return true
}

// parseUTC parses the times the daemon writes, RFC 3339 in UTC with up to
// nine digits of fraction ("2026-11-27T01:28:57.333776222Z"), as
// time.Parse(time.RFC3339Nano) does, in a tenth of its time (seven times
// per running instance). It reports false for any other form or a value
// whose validity it does not check itself (a day past the 28th): the
// caller then asks time.Time.UnmarshalJSON.
func parseUTC(b []byte) (time.Time, bool) {
	if len(b) < 20 || len(b) > 30 || b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' || b[16] != ':' || b[len(b)-1] != 'Z' {
		return time.Time{}, false
	}
	num := func(i, n int) int {
		v := 0
		for _, c := range b[i : i+n] {
			if c < '0' || c > '9' {
				return -1
			}
			v = v*10 + int(c-'0')
		}
		return v
	}
	year, month, day := num(0, 4), num(5, 2), num(8, 2)
	hour, minute, sec := num(11, 2), num(14, 2), num(17, 2)
	if year < 0 || month < 1 || month > 12 || day < 1 || day > 28 || hour < 0 || hour > 23 ||
		minute < 0 || minute > 59 || sec < 0 || sec > 59 {
		return time.Time{}, false
	}
	nsec := 0
	if frac := b[19 : len(b)-1]; len(frac) > 0 {
		if frac[0] != '.' || len(frac) < 2 {
			return time.Time{}, false
		}
		n := num(20, len(frac)-1)
		if n < 0 {
			return time.Time{}, false
		}
		for range 10 - len(frac) {
			n *= 10
		}
		nsec = n
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC), true
}

// timePtr reads a time into a new *time.Time (a slab's); null sets nil.
func (d *listDecoder) timePtr(dst **time.Time) bool {
	if d.null() {
		*dst = nil
		return true
	}
	if len(d.times) == cap(d.times) {
		d.times = make([]time.Time, 0, slabSize)
	}
	d.times = d.times[:len(d.times)+1]
	t := &d.times[len(d.times)-1]
	*dst = t
	return d.time(t)
}

// strMap reads an object of strings; null sets nil.
func (d *listDecoder) strMap(dst *map[string]string) bool {
	if d.null() {
		*dst = nil
		return true
	}
	if !d.next('{') {
		return false
	}
	m := map[string]string{}
	*dst = m
	if d.next('}') {
		return true
	}
	for {
		k, ok := d.str()
		if !ok || !d.next(':') {
			return false
		}
		var v string
		if !d.strOrNull(&v) {
			return false
		}
		m[k] = v
		if d.next('}') {
			return true
		}
		if !d.next(',') {
			return false
		}
	}
}

// devices reads an object of objects of strings; null sets nil.
func (d *listDecoder) devices(dst *map[string]map[string]string) bool {
	if d.null() {
		*dst = nil
		return true
	}
	if !d.next('{') {
		return false
	}
	m := map[string]map[string]string{}
	*dst = m
	if d.next('}') {
		return true
	}
	for {
		k, ok := d.str()
		if !ok || !d.next(':') {
			return false
		}
		var v map[string]string // a repeated key's object replaces the first, as in encoding/json
		if !d.strMap(&v) {
			return false
		}
		m[k] = v
		if d.next('}') {
			return true
		}
		if !d.next(',') {
			return false
		}
	}
}

// profilesList reads a list of strings (a slab's); null sets nil.
func (d *listDecoder) profilesList(dst *[]string) bool {
	if d.null() {
		*dst = nil
		return true
	}
	if !d.next('[') {
		return false
	}
	start := len(d.profiles)
	if d.next(']') {
		*dst = []string{}
		return true
	}
	for {
		s, ok := d.str()
		if !ok {
			return false
		}
		if len(d.profiles) == cap(d.profiles) {
			// A new slab: this list's strings move with it.
			slab := make([]string, 0, max(slabSize, 2*(len(d.profiles)-start+1)))
			slab = append(slab, d.profiles[start:]...)
			d.profiles, start = slab, 0
		}
		d.profiles = append(d.profiles, s)
		if d.next(']') {
			*dst = d.profiles[start:len(d.profiles):len(d.profiles)]
			return true
		}
		if !d.next(',') {
			return false
		}
	}
}

// conditions reads a list of conditions (a slab's); null sets nil.
func (d *listDecoder) conditions(dst *[]api.Condition) bool {
	if d.null() {
		*dst = nil
		return true
	}
	if !d.next('[') {
		return false
	}
	start := len(d.conds)
	if d.next(']') {
		*dst = []api.Condition{}
		return true
	}
	for {
		if len(d.conds) == cap(d.conds) {
			slab := make([]api.Condition, 0, max(slabSize, 2*(len(d.conds)-start+1)))
			slab = append(slab, d.conds[start:]...)
			d.conds, start = slab, 0
		}
		d.conds = d.conds[:len(d.conds)+1]
		if !d.condition(&d.conds[len(d.conds)-1]) {
			return false
		}
		if d.next(']') {
			*dst = d.conds[start:len(d.conds):len(d.conds)]
			return true
		}
		if !d.next(',') {
			return false
		}
	}
}

// object reads an object's keys, calling field with each key (the value
// is next); field reports false for a key it does not know.
func (d *listDecoder) object(field func(key string) bool) bool {
	if !d.next('{') {
		return false
	}
	if d.next('}') {
		return true
	}
	for {
		k, ok := d.str()
		if !ok || !d.next(':') || !field(k) {
			return false
		}
		if d.next('}') {
			return true
		}
		if !d.next(',') {
			return false
		}
	}
}

// fields reads an object whose known keys each fill one field: field
// returns the key's bit (0 for an unknown key, which fails) and whether
// its value was read. A key given twice fails the object: encoding/json
// keeps the last value, goccy/go-json the first, so such a body is left
// to them.
func (d *listDecoder) fields(field func(key string) (bit uint32, ok bool)) bool {
	var seen uint32
	return d.object(func(k string) bool {
		bit, ok := field(k)
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return ok
	})
}

// condition reads one condition.
func (d *listDecoder) condition(c *api.Condition) bool {
	return d.fields(func(k string) (bit uint32, ok bool) {
		switch k {
		case "type":
			bit, ok = 1, d.strOrNull(&c.Type)
		case "status":
			bit, ok = 2, d.strOrNull(&c.Status)
		case "reason":
			bit, ok = 4, d.strOrNull(&c.Reason)
		case "message":
			bit, ok = 8, d.strOrNull(&c.Message)
		case "last_transition_time":
			bit, ok = 16, d.time(&c.LastTransitionTime)
		}
		return bit, ok
	})
}

// agent reads the agent object.
func (d *listDecoder) agent(a *api.AgentInfo) bool {
	if d.null() {
		return true
	}
	return d.fields(func(k string) (bit uint32, ok bool) {
		switch k {
		case "state":
			bit, ok = 1, d.strOrNull(&a.State)
		case "last_heartbeat":
			bit, ok = 2, d.timePtr(&a.LastHeartbeat)
		case "since":
			bit, ok = 4, d.timePtr(&a.Since)
		}
		return bit, ok
	})
}

// rawValue decodes the next value into v with encoding/json (the keys a
// list rarely carries: timeline, guest).
func (d *listDecoder) rawValue(v any) bool {
	d.ws()
	start := d.i
	if !d.skip() {
		return false
	}
	return json.Unmarshal(d.b[start:d.i], v) == nil
}

// skip passes over one value, checking only its brackets and strings
// (rawValue's encoding/json checks the rest).
func (d *listDecoder) skip() bool {
	depth := 0
	for {
		switch c := d.peek(); c {
		case 0:
			return false
		case '"':
			if _, ok := d.str(); !ok {
				return false
			}
		case '{', '[':
			depth++
			d.i++
		case '}', ']':
			depth--
			d.i++
		case ',', ':':
			if depth == 0 {
				return false
			}
			d.i++
		default:
			for d.i < len(d.b) && !isDelim(d.b[d.i]) {
				d.i++
			}
		}
		if depth == 0 {
			return true
		}
		if depth < 0 {
			return false
		}
	}
}

// isDelim reports whether c ends a literal or number.
func isDelim(c byte) bool {
	switch c {
	case ',', ':', '{', '}', '[', ']', '"', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// instance reads one instance object.
func (d *listDecoder) instance(inst *api.Instance) bool {
	return d.fields(func(k string) (bit uint32, ok bool) {
		switch k {
		case "name":
			bit, ok = 1<<0, d.strOrNull(&inst.Name)
		case "uuid":
			bit, ok = 1<<1, d.strOrNull(&inst.UUID)
		case "backend":
			bit, ok = 1<<2, d.strOrNull(&inst.Backend)
		case "status":
			bit, ok = 1<<3, d.strOrNull(&inst.Status)
		case "status_code":
			n := int64(inst.StatusCode)
			bit, ok = 1<<4, d.int(&n) && int64(int(n)) == n
			inst.StatusCode = int(n)
		case "config":
			bit, ok = 1<<5, d.strMap(&inst.Config)
		case "devices":
			bit, ok = 1<<6, d.devices(&inst.Devices)
		case "boot":
			bit, ok = 1<<7, d.int(&inst.Boot)
		case "created_at":
			bit, ok = 1<<8, d.time(&inst.CreatedAt)
		case "started_at":
			bit, ok = 1<<9, d.timePtr(&inst.StartedAt)
		case "ready_at":
			bit, ok = 1<<10, d.timePtr(&inst.ReadyAt)
		case "link":
			bit, ok = 1<<11, d.strOrNull(&inst.Link)
		case "agent":
			bit, ok = 1<<12, d.agent(&inst.Agent)
		case "devlxd_socket":
			bit, ok = 1<<13, d.strOrNull(&inst.DevlxdSocket)
		case "details":
			bit, ok = 1<<14, d.strMap(&inst.Details)
		case "conditions":
			bit, ok = 1<<15, d.conditions(&inst.Conditions)
		case "location":
			bit, ok = 1<<16, d.strOrNull(&inst.Location)
		case "status_reason":
			bit, ok = 1<<17, d.strOrNull(&inst.StatusReason)
		case "profiles":
			bit, ok = 1<<18, d.profilesList(&inst.Profiles)
		case "timeline":
			bit, ok = 1<<19, d.rawValue(&inst.Timeline)
		case "ipv4":
			bit, ok = 1<<20, d.strOrNull(&inst.IPv4)
		case "guest":
			bit, ok = 1<<21, d.rawValue(&inst.Guest)
		}
		return bit, ok
	})
}

// list reads the metadata: a list of instances, or null (nil).
func (d *listDecoder) list() ([]api.Instance, bool) {
	if d.null() {
		return nil, true
	}
	if !d.next('[') {
		return nil, false
	}
	list := []api.Instance{}
	if d.next(']') {
		return list, true
	}
	for {
		start := d.i
		list = append(list, api.Instance{})
		if !d.instance(&list[len(list)-1]) {
			return nil, false
		}
		if len(list) == 1 {
			// Room for as many as there are bytes left for objects of
			// the first one's size: one allocation, not a doubling.
			if size := d.i - start; size > 0 {
				list = append(make([]api.Instance, 0, 1+(len(d.b)-d.i)/size+1), list...)
			}
		}
		if d.next(']') {
			return list, true
		}
		if !d.next(',') {
			return nil, false
		}
	}
}

// envelope reads the whole answer: a sync envelope whose metadata is a
// list of instances.
func (d *listDecoder) envelope() ([]api.Instance, bool) {
	var list []api.Instance
	var typ string
	ok := d.fields(func(k string) (bit uint32, ok bool) {
		var n int64
		var s string
		switch k {
		case "type":
			bit, ok = 1, d.strOrNull(&typ)
		case "status":
			bit, ok = 2, d.strOrNull(&s)
		case "operation":
			bit, ok = 4, d.strOrNull(&s)
		case "error":
			bit, ok = 8, d.strOrNull(&s)
		case "status_code", "error_code":
			bit, ok = 16, d.int(&n) && int64(int(n)) == n
			if k == "error_code" {
				bit = 32
			}
		case "metadata":
			bit = 64
			list, ok = d.list()
		}
		return bit, ok
	})
	if !ok || typ != api.TypeSync {
		return nil, false
	}
	d.ws()
	if d.i != len(d.b) {
		return nil, false
	}
	return list, true
}
