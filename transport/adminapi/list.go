package adminapi

import (
	"fmt"
	"io"
	"math/bits"
	"net"
	"slices"
	"sync"

	gojson "github.com/goccy/go-json"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/instance"
)

// listPrefix is what encoding/json writes of api.Sync(list) before the
// list's first element.
const listPrefix = `{"type":"sync","status":"Success","status_code":200,"operation":"","error_code":0,"error":"","metadata":[`

// listSuffix ends the answer after the list's last element.
const listSuffix = "]}"

// Chunk sizes of a list answer: the first chunk holds a short list; each
// next one doubles, up to listChunkMax.
const (
	listChunkMin = 16 << 10
	listChunkMax = 1 << 20
)

// listEncoder writes the answer of GET /1.0/instances one instance at a time,
// so that the instance service's shared views are encoded while it holds
// them. Each instance is encoded by goccy/go-json, whose output is
// encoding/json's (TestInstanceListMatchesEncodingJSON) at a fraction of the
// cost.
//
// The answer is written into chunks that are never copied to grow (at
// 10,000 running guests it is 12 MiB: growing one slice copied it about
// five times over, a third of the daemon's CPU for a list), and each
// instance is encoded straight into them from one reused api.Instance: no
// allocation per instance.
type listEncoder struct {
	chunks [][]byte // the filled chunks, then the one being written (the last)
	size   int      // bytes in all chunks
	n      int      // instances added
	enc    *gojson.Encoder
	w      api.Instance // the instance being encoded
	// ipv4, when set, gives an instance's guest address, from the agents'
	// cached reports or the member that runs it (API.listIPv4).
	ipv4 func(inst *instance.Instance) string
	// scratch is reused to build a URL or a summary object before it is
	// written (list_forms.go).
	scratch []byte
}

// chunkPools keep the chunks of sent answers for the next ones, one pool
// per chunk size (listChunkMin, doubling to listChunkMax): at 10,000
// running guests a full list is 12 MiB of chunks, which the runtime
// cleared on allocation and the GC then marked and swept at every list.
var chunkPools [chunkSizes]sync.Pool

// chunkSizes is how many chunk sizes there are: listChunkMin << 0 ..
// listChunkMin << 6 = listChunkMax (TestChunkPools).
const chunkSizes = 7

// chunkPool returns the pool of chunks of capacity size, nil for a size
// that has none.
func chunkPool(size int) *sync.Pool {
	if size < listChunkMin || size > listChunkMax || size&(size-1) != 0 {
		return nil
	}
	return &chunkPools[bits.TrailingZeros(uint(size/listChunkMin))]
}

// newChunk returns an empty chunk of capacity size, from its pool when
// one is there.
func newChunk(size int) []byte {
	if p := chunkPool(size); p != nil {
		if c, ok := p.Get().(*[]byte); ok {
			return (*c)[:0]
		}
	}
	return make([]byte, 0, size)
}

// newListEncoder starts an answer.
func newListEncoder() *listEncoder {
	e := &listEncoder{chunks: [][]byte{newChunk(listChunkMin)}}
	e.enc = gojson.NewEncoder(e)
	_, _ = e.Write([]byte(listPrefix))
	return e
}

// Write appends p to the answer, whole to the last chunk (a new one when p
// does not fit in what is left of it). It never fails.
func (e *listEncoder) Write(p []byte) (int, error) {
	last := &e.chunks[len(e.chunks)-1]
	if len(*last)+len(p) > cap(*last) {
		size := min(2*cap(*last), listChunkMax)
		e.chunks = append(e.chunks, newChunk(max(size, len(p))))
		last = &e.chunks[len(e.chunks)-1]
	}
	*last = append(*last, p...)
	e.size += len(p)
	return len(p), nil
}

// add appends one instance.
func (e *listEncoder) add(inst *instance.Instance) error {
	if e.n > 0 {
		_, _ = e.Write([]byte{','})
	}
	e.w = instance.WireInstance(inst, nil)
	if e.ipv4 != nil {
		e.w.IPv4 = e.ipv4(inst)
	}
	// The encoder writes the instance and a newline in one Write: the
	// newline is the last byte of the last chunk.
	if err := e.enc.Encode(&e.w); err != nil {
		return fmt.Errorf("encoding instance %q: %w", inst.Name, err)
	}
	last := &e.chunks[len(e.chunks)-1]
	*last = (*last)[:len(*last)-1]
	e.size--
	e.n++
	return nil
}

// end ends the answer; it returns its length.
func (e *listEncoder) end() int {
	_, _ = e.Write([]byte(listSuffix))
	return e.size
}

// bytes ends the answer and returns it in one slice.
func (e *listEncoder) bytes() []byte {
	e.end()
	if len(e.chunks) == 1 {
		return e.chunks[0]
	}
	b := make([]byte, 0, e.size)
	for _, c := range e.chunks {
		b = append(b, c...)
	}
	return b
}

// reader ends the answer and returns it as a reader of its chunks, and its
// length. Closing the reader (fasthttp does once the answer is sent or
// dropped) gives the chunks back to their pools: nothing may use the
// encoder afterwards.
func (e *listEncoder) reader() (io.ReadCloser, int) {
	n := e.end()
	return &listBody{Buffers: slices.Clone(e.chunks), chunks: e.chunks}, n
}

// listBody is an answer being sent: Read consumes Buffers (its own copy of
// the chunks' headers), Close puts the chunks back.
type listBody struct {
	net.Buffers
	chunks [][]byte
}

// Close gives the answer's chunks back to their pools; a second call does
// nothing.
func (b *listBody) Close() error {
	for i, c := range b.chunks {
		if p := chunkPool(cap(c)); p != nil {
			c = c[:0]
			p.Put(&c)
		}
		b.chunks[i] = nil
	}
	b.chunks, b.Buffers = nil, nil
	return nil
}

// appendInstanceList returns the answer listing list.
func appendInstanceList(list []*instance.Instance) ([]byte, error) {
	e := newListEncoder()
	for _, inst := range list {
		if err := e.add(inst); err != nil {
			return nil, err
		}
	}
	return e.bytes(), nil
}
