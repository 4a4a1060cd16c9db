package adminapi

import (
	"bytes"
	"sync/atomic"
	"time"

	"github.com/guestlink/guestlink/core/instance"
)

// encodedView is one instance's entry of GET /1.0/instances as encoded
// once and kept in its instance.ViewCache until the instance changes: a
// list copies it instead of encoding the instance again (at 10,000 running
// guests the encoding was most of a list's CPU). It holds what both forms
// need: the full object is buf whole, a summary the keys it names.
//
// Two parts of an entry change without a new version and are never in it:
// the agent's last heartbeat (a heartbeat moves only its time: buf has a
// hole at hb, filled from the view each time), and the guest's address
// (ipv4, from the agents' cached reports, written after buf). An
// encodedView is never changed once stored: concurrent lists read it.
type encodedView struct {
	// buf is the full object from its '{' to the end of its last key
	// but ipv4 (profiles): no closing brace, and no heartbeat value.
	buf []byte
	// hb is where the agent's last_heartbeat value goes in buf.
	hb int
	// seg holds, for each summaryFields key, where its "key":value is in
	// buf (start, end); {-1, -1} for a key the object omits, and ipv4.
	seg [][2]int32
	// summary is the last summary made of buf (a list copies one
	// contiguous piece per instance, not one per key: the pieces of
	// 10,000 instances are scattered in memory, and each costs a cache
	// miss); another field set replaces it.
	summary atomic.Pointer[encodedSummary]
}

// encodedSummary is an instance's summary object for one field set, made
// from its encodedView, with the same holes: no ipv4 key, no closing brace,
// no heartbeat value.
type encodedSummary struct {
	mask uint64 // the field set: bit i is summaryFields[i]
	buf  []byte
	hb   int // where the heartbeat value goes in buf; -1: no agent key
}

// summaryOf returns v's summary of the keys idx (indexes of summaryFields,
// in order; mask their bits), made now if v has none of that set.
func (v *encodedView) summaryOf(idx []int, mask uint64) *encodedSummary {
	if s := v.summary.Load(); s != nil && s.mask == mask {
		return s
	}
	s := &encodedSummary{mask: mask, hb: -1}
	b := make([]byte, 0, 256)
	b = append(b, '{')
	for _, i := range idx {
		seg := v.seg[i]
		if seg[0] < 0 {
			continue // omitted, or ipv4 (written after)
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		if start, end := int(seg[0]), int(seg[1]); v.hb >= start && v.hb < end {
			s.hb = len(b) + v.hb - start
		}
		b = append(b, v.buf[seg[0]:seg[1]]...)
	}
	s.buf = b
	v.summary.Store(s)
	return s
}

// encodeView encodes inst's entry. Its bytes are those of the full object
// (TestListAnswerMatchesEncodingJSON): each key's value is written by
// summaryFields, in the object's key order.
func encodeView(inst *instance.Instance) *encodedView {
	v := &encodedView{seg: make([][2]int32, len(summaryFields)), hb: -1}
	b := make([]byte, 0, 1536)
	b = append(b, '{')
	for i, f := range summaryFields {
		if f.value == nil || (f.omit != nil && f.omit(inst)) {
			v.seg[i] = [2]int32{-1, -1}
			continue
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		start := len(b)
		b = append(b, '"')
		b = append(b, f.key...)
		b = append(b, '"', ':')
		if f.key == "agent" {
			b = append(b, `{"state":`...)
			b = appendJSONString(b, string(inst.Agent.State))
			b = append(b, `,"last_heartbeat":`...)
			v.hb = len(b)
			b = append(b, `,"since":`...)
			b = appendJSONTime(b, inst.Agent.Since)
			b = append(b, '}')
		} else {
			b = f.value(b, inst)
		}
		v.seg[i] = [2]int32{int32(start), int32(len(b))}
	}
	v.buf = bytes.Clone(b) // its own size: kept for as long as the instance does not change
	return v
}

// addRowsFunc returns the function that appends a batch of rows in form
// (with fields, for a summary) from their cached encodings, encoding a row's
// view first when its cache holds none of the view's version. The URL list
// has nothing worth keeping: it is written as it is. Per row it does no
// more than copy the cached bytes and write the heartbeat's time and the
// address into them: the view is built only to encode it, and the batch's
// addresses are read at once (API.rowsIPv4).
func (e *listEncoder) addRowsFunc(form listForm, fields []summaryField, a *API) func([]instance.CachedRow) error {
	var idx []int     // the summary's keys, as indexes of summaryFields
	var mask uint64   // their bits
	withIPv4 := false // ipv4 asked (always the last key)
	for _, f := range fields {
		for i := range summaryFields {
			if summaryFields[i].key == f.key {
				idx = append(idx, i)
				mask |= 1 << i
				withIPv4 = withIPv4 || summaryFields[i].value == nil
			}
		}
	}
	withIPv4 = withIPv4 || form == listFull
	ips := make([]string, instance.ListBatch)
	uuids := make([]string, instance.ListBatch)
	return func(rows []instance.CachedRow) error {
		if form == listURLs {
			for i := range rows {
				e.addURLName(rows[i].Name)
			}
			return nil
		}
		if len(rows) > len(ips) {
			ips, uuids = make([]string, len(rows)), make([]string, len(rows))
		}
		if withIPv4 {
			a.rowsIPv4(rows, ips, uuids)
		}
		for i := range rows {
			r := &rows[i]
			v, _ := r.Cached.(*encodedView)
			if v == nil {
				v = encodeView(r.View())
				r.Cache.Store(r.Version, v)
			}
			if e.n > 0 {
				_, _ = e.Write([]byte{','})
			}
			e.n++
			if form == listFull {
				e.writeSpan(v.buf, v.hb, r.LastHeartbeat)
				e.writeIPv4(ips[i], true)
				_, _ = e.Write([]byte{'}'})
				continue
			}
			s := v.summaryOf(idx, mask)
			e.writeSpan(s.buf, s.hb, r.LastHeartbeat)
			if withIPv4 {
				e.writeIPv4(ips[i], len(s.buf) > 1)
			}
			_, _ = e.Write([]byte{'}'})
		}
		return nil
	}
}

// writeSpan appends buf, with the heartbeat time hb in its hole at at (-1:
// none).
func (e *listEncoder) writeSpan(buf []byte, at int, hb *time.Time) {
	if at < 0 {
		_, _ = e.Write(buf)
		return
	}
	_, _ = e.Write(buf[:at])
	e.scratch = appendJSONTime(e.scratch[:0], hb)
	_, _ = e.Write(e.scratch)
	_, _ = e.Write(buf[at:])
}

// writeIPv4 appends the ipv4 key with the address ip, after a comma when
// comma is set, or nothing when the address is unknown (omitempty, as in
// the full object).
func (e *listEncoder) writeIPv4(ip string, comma bool) {
	if ip == "" {
		return
	}
	b := e.scratch[:0]
	if comma {
		b = append(b, ',')
	}
	b = append(b, `"ipv4":`...)
	b = appendJSONString(b, ip)
	e.scratch = b
	_, _ = e.Write(b)
}

func init() {
	if len(summaryFields) > 64 {
		panic("adminapi: more than 64 summary fields: encodedSummary.mask holds 64")
	}
}
