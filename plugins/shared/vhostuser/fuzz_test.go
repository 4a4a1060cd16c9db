package vhostuser_test

import (
	"encoding/binary"
	"testing"

	"github.com/guestlink/guestlink/plugins/shared/vhostuser"
)

// FuzzHandle feeds a session a sequence of arbitrary messages (headers and
// payloads cut from the input, no fds): each is applied or refused with an
// error, nothing panics.
func FuzzHandle(f *testing.F) {
	le := binary.LittleEndian
	msg := func(req uint32, p []byte) []byte {
		b := le.AppendUint32(nil, req)
		b = le.AppendUint32(b, 1)
		b = le.AppendUint32(b, uint32(len(p)))
		return append(b, p...)
	}
	f.Add(msg(1, nil))
	f.Add(append(msg(8, le.AppendUint64(nil, 64<<32)), msg(9, make([]byte, 40))...))
	f.Add(msg(5, append(le.AppendUint32(nil, 1), make([]byte, 36)...)))
	f.Add(msg(24, append(le.AppendUint32(le.AppendUint32(nil, 4), 8), make([]byte, 12)...)))
	f.Add(append(msg(16, le.AppendUint64(nil, 1<<3)), msg(11, make([]byte, 8))...))
	f.Fuzz(func(t *testing.T, in []byte) {
		s := vhostuser.NewSession(nil, newRecorder())
		for len(in) >= vhostuser.HeaderSize {
			h, err := vhostuser.ParseHeader(in)
			if err != nil {
				return
			}
			in = in[vhostuser.HeaderSize:]
			n := min(int(h.Size), len(in))
			if _, err := s.Handle(h, in[:n], nil); err != nil {
				return
			}
			in = in[n:]
		}
	})
}
