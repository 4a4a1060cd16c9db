// Package vsockdev is a virtio-vsock device (virtio 1.x, "Socket Device")
// served over vhost-user (plugins/shared/vhostuser), so a QEMU guest gets
// real AF_VSOCK on a host without /dev/vhost-vsock. The host side is the
// Firecracker hybrid convention (link/hybrid): a guest connecting to CID 2
// port P reaches the host Unix socket "<uds>_P", and a host client that
// connects to "<uds>" and writes "CONNECT <port>\n" reaches the guest's
// listener on that port after reading "OK <hostport>\n".
//
// Files: packet.go (the packet header), device.go (queues, the
// connection table, credit-based flow control), host.go (the Unix socket
// side).
package vsockdev

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// HeaderLen is the size of struct virtio_vsock_hdr.
const HeaderLen = 44

// Operations (virtio 1.x, 5.10.6).
const (
	OpInvalid       = 0
	OpRequest       = 1
	OpResponse      = 2
	OpRST           = 3
	OpShutdown      = 4
	OpRW            = 5
	OpCreditUpdate  = 6
	OpCreditRequest = 7
)

// TypeStream is VIRTIO_VSOCK_TYPE_STREAM, the only socket type this device offers.
const TypeStream = 1

// Shutdown flags.
const (
	ShutdownRcv  = 1
	ShutdownSend = 2
)

// HostCID is the CID of the host (VMADDR_CID_HOST).
const HostCID = 2

// MaxPayload is the largest RW payload accepted from the guest or sent to it
// (Linux's VIRTIO_VSOCK_MAX_PKT_BUF_SIZE).
const MaxPayload = 64 << 10

// ErrBadPacket is wrapped by every error about a malformed packet.
var ErrBadPacket = errors.New("malformed vsock packet")

// Header is struct virtio_vsock_hdr.
type Header struct {
	SrcCID, DstCID   uint64
	SrcPort, DstPort uint32
	Len              uint32
	Type, Op         uint16
	Flags            uint32
	BufAlloc, FwdCnt uint32
}

// ParseHeader decodes a packet header from the first HeaderLen bytes of b
// and checks its length field against the bytes that follow.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, fmt.Errorf("%w: %d bytes, want a %d-byte header", ErrBadPacket, len(b), HeaderLen)
	}
	le := binary.LittleEndian
	h := Header{
		SrcCID: le.Uint64(b), DstCID: le.Uint64(b[8:]),
		SrcPort: le.Uint32(b[16:]), DstPort: le.Uint32(b[20:]),
		Len: le.Uint32(b[24:]), Type: le.Uint16(b[28:]), Op: le.Uint16(b[30:]),
		Flags: le.Uint32(b[32:]), BufAlloc: le.Uint32(b[36:]), FwdCnt: le.Uint32(b[40:]),
	}
	if h.Len > MaxPayload {
		return h, fmt.Errorf("%w: payload of %d bytes, at most %d", ErrBadPacket, h.Len, MaxPayload)
	}
	if uint64(h.Len) > uint64(len(b)-HeaderLen) {
		return h, fmt.Errorf("%w: header says %d payload bytes, the buffers hold %d", ErrBadPacket, h.Len, len(b)-HeaderLen)
	}
	if h.Op != OpRW && h.Len != 0 {
		return h, fmt.Errorf("%w: op %d with a %d-byte payload", ErrBadPacket, h.Op, h.Len)
	}
	return h, nil
}

// Append appends the encoded header to b.
func (h Header) Append(b []byte) []byte {
	le := binary.LittleEndian
	b = le.AppendUint64(b, h.SrcCID)
	b = le.AppendUint64(b, h.DstCID)
	b = le.AppendUint32(b, h.SrcPort)
	b = le.AppendUint32(b, h.DstPort)
	b = le.AppendUint32(b, h.Len)
	b = le.AppendUint16(b, h.Type)
	b = le.AppendUint16(b, h.Op)
	b = le.AppendUint32(b, h.Flags)
	b = le.AppendUint32(b, h.BufAlloc)
	return le.AppendUint32(b, h.FwdCnt)
}
