package ringbuffer

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestNewSize(t *testing.T) {
	tests := []struct {
		size int
		ok   bool
	}{
		{size: 1, ok: true},
		{size: 2, ok: true},
		{size: 16, ok: true},
		{size: 65536, ok: true},
		{size: MaxSize, ok: true},
		{size: 0},
		{size: -16},
		{size: 3},
		{size: 17},
		{size: 24},
		{size: MaxSize * 2},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.size), func(t *testing.T) {
			r, err := New(tc.size)
			if tc.ok {
				if err != nil {
					t.Fatalf("New(%d): %v", tc.size, err)
				}
				if r.Size() != tc.size || r.Len() != 0 {
					t.Fatalf("New(%d): size %d len %d", tc.size, r.Size(), r.Len())
				}
				return
			}
			if !errors.Is(err, ErrSize) {
				t.Fatalf("New(%d) error = %v, want ErrSize", tc.size, err)
			}
			if !strings.Contains(err.Error(), fmt.Sprint(tc.size)) {
				t.Fatalf("error %q does not name the size", err)
			}
		})
	}
}

// op is one step of a ring scenario: a write of w, or a read of max bytes
// expecting want.
type op struct {
	w    string
	max  int
	want string
}

func TestRingSemantics(t *testing.T) {
	tests := []struct {
		name string
		size int
		ops  []op
	}{
		{"empty read", 16, []op{{max: 16, want: ""}}},
		{"zero max", 16, []op{{w: "abc"}, {max: 0, want: ""}, {max: 16, want: "abc"}}},
		{"negative max", 16, []op{{w: "abc"}, {max: -1, want: ""}, {max: 3, want: "abc"}}},
		{"read consumes", 16, []op{{w: "STARTED\n"}, {max: 16, want: "STARTED\n"}, {max: 16, want: ""}}},
		{"partial reads", 16, []op{{w: "STARTED\n"}, {max: 3, want: "STA"}, {max: 3, want: "RTE"}, {max: 16, want: "D\n"}}},
		{"exactly full", 8, []op{{w: "01234567"}, {max: 8, want: "01234567"}}},
		{"overflow drops oldest", 16, []op{
			{w: "STARTED\n"}, {w: "CONNECTED\n"},
			{max: 16, want: "ARTED\nCONNECTED\n"},
		}},
		{"one write larger than ring", 4, []op{{w: "abcdefghij"}, {max: 100, want: "ghij"}}},
		{"wrap around", 8, []op{
			{w: "abcdef"}, {max: 4, want: "abcd"}, {w: "ghijkl"},
			{max: 8, want: "efghijkl"},
		}},
		{"wrap and overflow", 8, []op{
			{w: "abcdef"}, {max: 5, want: "abcde"}, {w: "0123456789"},
			{max: 3, want: "234"}, {max: 8, want: "56789"},
		}},
		{"size one", 1, []op{{w: "xyz"}, {max: 5, want: "z"}, {max: 5, want: ""}}},
		{"heartbeats keep last line", 16, []op{
			{w: "STARTED\n"}, {w: "STARTED\n"}, {w: "STARTED\n"}, {w: "STOPPED\n"},
			{max: 16, want: "STARTED\nSTOPPED\n"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(tc.size)
			if err != nil {
				t.Fatal(err)
			}
			for i, o := range tc.ops {
				if o.w != "" {
					if n, err := r.Write([]byte(o.w)); n != len(o.w) || err != nil {
						t.Fatalf("op %d: Write(%q) = %d, %v", i, o.w, n, err)
					}
					continue
				}
				got := r.Read(o.max)
				if got == nil {
					t.Fatalf("op %d: Read returned nil, want non-nil slice", i)
				}
				if string(got) != o.want {
					t.Fatalf("op %d: Read(%d) = %q, want %q", i, o.max, got, o.want)
				}
			}
		})
	}
}

// TestMatchesByteModel checks Write and Read against a byte-by-byte model of
// QEMU's ringbuf_chr_write and ringbuf_read for many write/read patterns.
func TestMatchesByteModel(t *testing.T) {
	for _, size := range []int{1, 2, 8, 16, 64} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			r, _ := New(size)
			model := &byteModel{buf: make([]byte, size)}
			seed := uint32(size)
			next := func(n uint32) int {
				seed = seed*1664525 + 1013904223
				return int((seed >> 8) % n)
			}
			for i := 0; i < 2000; i++ {
				if next(2) == 0 {
					p := bytes.Repeat([]byte{byte(i)}, next(uint32(3*size)+1))
					for j := range p {
						p[j] += byte(j)
					}
					r.Write(p)
					model.write(p)
					continue
				}
				max := next(uint32(2*size) + 1)
				if got, want := r.Read(max), model.read(max); !bytes.Equal(got, want) {
					t.Fatalf("step %d: Read(%d) = %v, model %v", i, max, got, want)
				}
			}
		})
	}
}

// byteModel is QEMU's ringbuf algorithm transcribed one byte at a time.
type byteModel struct {
	buf        []byte
	prod, cons uint32
}

func (m *byteModel) write(p []byte) {
	size := uint32(len(m.buf))
	for _, c := range p {
		m.buf[m.prod&(size-1)] = c
		m.prod++
		if m.prod-m.cons > size {
			m.cons = m.prod - size
		}
	}
}

func (m *byteModel) read(max int) []byte {
	out := []byte{}
	size := uint32(len(m.buf))
	for i := 0; i < max && m.cons != m.prod; i++ {
		out = append(out, m.buf[m.cons&(size-1)])
		m.cons++
	}
	return out
}

func TestConcurrentUse(t *testing.T) {
	r, _ := New(64)
	var wg sync.WaitGroup
	const writers, writes = 4, 2000
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < writes; i++ {
				r.Write([]byte("STARTED\n"))
			}
		}()
	}
	done := make(chan struct{})
	writersDone := stop(&wg)
	var total int
	go func() {
		defer close(done)
		for {
			select {
			case <-writersDone:
				total += len(r.Read(1 << 20))
				return
			default:
				b := r.Read(7)
				if len(b) > 7 {
					t.Errorf("Read(7) returned %d bytes", len(b))
				}
				total += len(b)
			}
		}
	}()
	<-done
	if l := r.Len(); l != 0 {
		t.Fatalf("Len after final read = %d", l)
	}
	if total > writers*writes*8 || total == 0 {
		t.Fatalf("read %d bytes in total, wrote %d", total, writers*writes*8)
	}
}

func stop(wg *sync.WaitGroup) <-chan struct{} {
	c := make(chan struct{})
	go func() { wg.Wait(); close(c) }()
	return c
}

func BenchmarkWrite(b *testing.B) {
	for _, n := range []int{8, 4096} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			r, _ := New(16)
			p := bytes.Repeat([]byte("x"), n)
			b.SetBytes(int64(n))
			for b.Loop() {
				r.Write(p)
			}
		})
	}
}

func BenchmarkWriteRead(b *testing.B) {
	r, _ := New(4096)
	p := []byte("STARTED\n")
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		r.Write(p)
		if len(r.Read(16)) != len(p) {
			b.Fatal("short read")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/line")
}
