package vhostuser_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/guestlink/guestlink/plugins/shared/vhostuser"
	"github.com/guestlink/guestlink/plugins/shared/vhostuser/vhostusertest"
)

// recorder is a device of one queue that records what the driver sends.
type recorder struct {
	got    chan []byte
	resets chan struct{}
}

func newRecorder() *recorder {
	return &recorder{got: make(chan []byte, 64), resets: make(chan struct{}, 8)}
}

func (r *recorder) Features() uint64 {
	return vhostuser.FeatureVersion1 | vhostuser.FeatureIndirectDesc
}
func (r *recorder) NumQueues() int { return 1 }
func (r *recorder) Config() []byte { return []byte{1, 2, 3, 4, 5, 6, 7, 8} }
func (r *recorder) Reset()         { r.resets <- struct{}{} }
func (r *recorder) RunQueue(q *vhostuser.Queue, stop <-chan struct{}) error {
	for {
		for {
			c, ok, err := q.Pop()
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			b := make([]byte, c.ReadableLen())
			if _, err := q.Read(&c, 0, b); err != nil {
				return err
			}
			if err := q.Push(&c, 0); err != nil {
				return err
			}
			if err := q.Notify(); err != nil {
				return err
			}
			r.got <- b
		}
		select {
		case <-stop:
			return nil
		case <-q.Kicks():
		}
	}
}

// serve runs a session of dev on a socket pair and returns the front-end
// and the channel Serve's result arrives on (once).
func serve(t *testing.T, dev vhostuser.Device) (*vhostusertest.Frontend, <-chan error) {
	front, back := vhostusertest.NewSocketPair(t)
	done := make(chan error, 1)
	ended := make(chan struct{})
	go func() {
		done <- vhostuser.NewSession(back, dev).Serve()
		close(ended)
	}()
	f := vhostusertest.New(t, front, dev.NumQueues())
	t.Cleanup(func() {
		f.Close()
		<-ended
	})
	return f, done
}

func TestSessionCarriesChains(t *testing.T) {
	r := newRecorder()
	f, done := serve(t, r)
	cfg, err := f.Setup(vhostuser.FeatureVersion1|vhostuser.FeatureIndirectDesc, 8)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	if !bytes.Equal(cfg, r.Config()) {
		t.Fatalf("GET_CONFIG = %x, want %x", cfg, r.Config())
	}
	q := f.Queues[0]
	tests := []struct {
		name  string
		offer func()
		want  string
	}{
		{"one descriptor", func() { q.OfferReadable([]byte("hello")) }, "hello"},
		{"three chained", func() { q.OfferReadable([]byte("a"), []byte("bc"), []byte("def")) }, "abcdef"},
		{"indirect table", func() { q.OfferIndirect([]byte("in"), []byte("direct")) }, "indirect"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.offer()
			select {
			case b := <-r.got:
				if string(b) != tt.want {
					t.Fatalf("device read %q, want %q", b, tt.want)
				}
			case err := <-done:
				t.Fatalf("session ended: %v", err)
			case <-time.After(10 * time.Second):
				t.Fatal("device read nothing within 10s")
			}
			if !q.WaitCall(10 * time.Second) {
				t.Fatal("no call eventfd signal")
			}
			if _, _, ok := q.TakeUsed(); !ok {
				t.Fatal("chain not in the used ring")
			}
		})
	}
	base, err := f.GetVringBase(0)
	if err != nil || base != uint32(len(tests)) {
		t.Fatalf("GET_VRING_BASE = %d, %v; want %d", base, err, len(tests))
	}
}

// TestSessionRefusesGarbage sends one bad message after a good handshake
// and checks that the session ends with a protocol error (the connection
// is closed, nothing panics).
func TestSessionRefusesGarbage(t *testing.T) {
	le := binary.LittleEndian
	state := func(i, n uint32) []byte { return le.AppendUint32(le.AppendUint32(nil, i), n) }
	raw := func(req, flags, size uint32, payload []byte) []byte {
		b := le.AppendUint32(nil, req)
		b = le.AppendUint32(b, flags)
		b = le.AppendUint32(b, size)
		return append(b, payload...)
	}
	addr := func(i uint32, desc uint64) []byte {
		b := state(i, 0)
		b = le.AppendUint64(b, desc)
		b = le.AppendUint64(b, vhostusertest.UserBase+0x2000)
		b = le.AppendUint64(b, vhostusertest.UserBase+0x3000)
		return le.AppendUint64(b, 0)
	}
	tests := []struct {
		name string
		msg  []byte
	}{
		{"version 2", raw(1, 2, 0, nil)},
		{"reply flag in a request", raw(1, 1|4, 0, nil)},
		{"payload over the limit", raw(5, 1, 1<<20, nil)},
		{"unknown request", raw(999, 1, 0, nil)},
		{"SET_FEATURES short", raw(2, 1, 4, []byte{1, 2, 3, 4})},
		{"SET_FEATURES not offered", raw(2, 1, 8, le.AppendUint64(nil, 1<<63))},
		{"SET_MEM_TABLE no regions", raw(5, 1, 8, make([]byte, 8))},
		{"SET_MEM_TABLE 9 regions", raw(5, 1, 8, append(le.AppendUint32(nil, 9), 0, 0, 0, 0))},
		{"SET_MEM_TABLE region without fd", raw(5, 1, 40, append(le.AppendUint32(nil, 1), make([]byte, 36)...))},
		{"SET_VRING_NUM queue 7", raw(8, 1, 8, state(7, 64))},
		{"SET_VRING_NUM size 100", raw(8, 1, 8, state(0, 100))},
		{"SET_VRING_NUM size 65536", raw(8, 1, 8, state(0, 65536))},
		{"SET_VRING_ADDR outside memory", raw(9, 1, 40, addr(0, vhostusertest.UserBase+vhostusertest.MemSize-16))},
		{"SET_VRING_ADDR guest-physical", raw(9, 1, 40, addr(0, 0x1000))},
		{"SET_VRING_KICK reserved bits", raw(12, 1, 8, le.AppendUint64(nil, 1<<20))},
		{"SET_VRING_KICK no fd", raw(12, 1, 8, le.AppendUint64(nil, 0))},
		{"SET_VRING_ENABLE 2", raw(18, 1, 8, state(0, 2))},
		{"GET_CONFIG oversized", raw(24, 1, 12, append(le.AppendUint32(le.AppendUint32(nil, 0), 4096), 0, 0, 0, 0))},
		{"SET_LOG_BASE", raw(6, 1, 8, make([]byte, 8))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRecorder()
			f, done := serve(t, r)
			if _, err := f.Setup(vhostuser.FeatureVersion1, 8); err != nil {
				t.Fatalf("Setup: %v", err)
			}
			// Stop the queue so ring changes are allowed, as QEMU does.
			if _, err := f.GetVringBase(0); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Conn.Write(tt.msg); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if !errors.Is(err, vhostuser.ErrProtocol) && !errors.Is(err, vhostuser.ErrOutOfBounds) {
					t.Fatalf("Serve = %v, want a protocol error", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("session still running after garbage")
			}
			select {
			case <-r.resets:
			default:
				t.Fatal("device not reset when the session ended")
			}
		})
	}
}

func TestParseHeader(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want vhostuser.Header
		ok   bool
	}{
		{"get features", []byte{1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0}, vhostuser.Header{Request: 1, Flags: 1}, true},
		{"need reply", []byte{2, 0, 0, 0, 9, 0, 0, 0, 8, 0, 0, 0}, vhostuser.Header{Request: 2, Flags: 9, Size: 8}, true},
		{"short", []byte{1, 0, 0}, vhostuser.Header{}, false},
		{"version 0", []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, vhostuser.Header{}, false},
		{"size 4097", []byte{1, 0, 0, 0, 1, 0, 0, 0, 1, 16, 0, 0}, vhostuser.Header{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := vhostuser.ParseHeader(tt.in)
			if (err == nil) != tt.ok || (tt.ok && got != tt.want) {
				t.Fatalf("ParseHeader = %+v, %v; want %+v ok=%v", got, err, tt.want, tt.ok)
			}
		})
	}
}
