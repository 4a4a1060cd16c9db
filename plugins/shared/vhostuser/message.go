// Package vhostuser is the back-end side of QEMU's vhost-user protocol
// (docs/interop/vhost-user.rst): it reads the front-end's messages from a
// Unix socket, maps the guest memory it is given as file descriptors, and
// runs the device's split virtqueues (virtio 1.x, 2.7). A device (see
// plugins/shared/vsockdev) supplies its features, its config space and one
// handler per queue; everything the guest or the front-end hands over
// (message sizes, region tables, ring addresses, descriptor chains) is
// checked against the mapped regions before it is touched, and anything
// malformed ends the connection with an error instead of a panic.
//
// Files: message.go (wire format), memory.go (the region table),
// virtqueue.go (split rings and descriptor chains), server.go (the
// per-connection session).
package vhostuser

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Request is a front-end message type (vhost-user.rst, "Front-end message types").
type Request uint32

// The front-end requests this back-end knows by name.
const (
	GetFeatures         Request = 1
	SetFeatures         Request = 2
	SetOwner            Request = 3
	ResetOwner          Request = 4
	SetMemTable         Request = 5
	SetLogBase          Request = 6
	SetLogFD            Request = 7
	SetVringNum         Request = 8
	SetVringAddr        Request = 9
	SetVringBase        Request = 10
	GetVringBase        Request = 11
	SetVringKick        Request = 12
	SetVringCall        Request = 13
	SetVringErr         Request = 14
	GetProtocolFeatures Request = 15
	SetProtocolFeatures Request = 16
	GetQueueNum         Request = 17
	SetVringEnable      Request = 18
	SetBackendReqFD     Request = 21
	GetConfig           Request = 24
	SetConfig           Request = 25
	ResetDevice         Request = 34
	GetMaxMemSlots      Request = 36
	SetStatus           Request = 39
	GetStatus           Request = 40
)

// Header flags.
const (
	flagVersionMask = 0x3
	flagVersion     = 0x1
	flagReply       = 1 << 2
	flagNeedReply   = 1 << 3
)

// Feature bits the protocol itself defines.
const (
	// FeatureProtocolFeatures (VHOST_USER_F_PROTOCOL_FEATURES) enables
	// GET/SET_PROTOCOL_FEATURES and starts rings disabled.
	FeatureProtocolFeatures = 1 << 30
	// FeatureVersion1 is VIRTIO_F_VERSION_1.
	FeatureVersion1 = 1 << 32
	// FeatureIndirectDesc is VIRTIO_RING_F_INDIRECT_DESC.
	FeatureIndirectDesc = 1 << 28
	// FeatureNotifyOnEmpty is VIRTIO_F_NOTIFY_ON_EMPTY.
	FeatureNotifyOnEmpty = 1 << 24
)

// Protocol feature bits (GET_PROTOCOL_FEATURES).
const (
	ProtocolMQ       = 1 << 0
	ProtocolReplyAck = 1 << 3
	ProtocolConfig   = 1 << 9
)

// HeaderSize is the size of a message header: request, flags, size (u32 each).
const HeaderSize = 12

// MaxPayload bounds a message's payload. The largest message this back-end
// reads is SET_MEM_TABLE (8 + 8*32 bytes) or a config access (12 + 256).
const MaxPayload = 4096

// MaxFDs is the most file descriptors a message may carry (the memory table's 8 regions).
const MaxFDs = 8

// ErrProtocol is wrapped by every error about a malformed message.
var ErrProtocol = errors.New("vhost-user protocol error")

// Header is a message header.
type Header struct {
	Request Request
	Flags   uint32
	Size    uint32
}

// NeedReply reports whether the front-end asked for a REPLY_ACK.
func (h Header) NeedReply() bool { return h.Flags&flagNeedReply != 0 }

// ParseHeader decodes and checks a message header.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: header of %d bytes, want %d", ErrProtocol, len(b), HeaderSize)
	}
	h := Header{
		Request: Request(binary.LittleEndian.Uint32(b)),
		Flags:   binary.LittleEndian.Uint32(b[4:]),
		Size:    binary.LittleEndian.Uint32(b[8:]),
	}
	if h.Flags&flagVersionMask != flagVersion {
		return Header{}, fmt.Errorf("%w: request %d: version %d, want 1", ErrProtocol, h.Request, h.Flags&flagVersionMask)
	}
	if h.Flags&flagReply != 0 {
		return Header{}, fmt.Errorf("%w: request %d: reply flag set in a request", ErrProtocol, h.Request)
	}
	if h.Size > MaxPayload {
		return Header{}, fmt.Errorf("%w: request %d: payload of %d bytes, at most %d", ErrProtocol, h.Request, h.Size, MaxPayload)
	}
	return h, nil
}

// formatReply returns a reply to req carrying payload.
func formatReply(req Request, payload []byte) []byte {
	b := make([]byte, HeaderSize+len(payload))
	binary.LittleEndian.PutUint32(b, uint32(req))
	binary.LittleEndian.PutUint32(b[4:], flagVersion|flagReply)
	binary.LittleEndian.PutUint32(b[8:], uint32(len(payload)))
	copy(b[HeaderSize:], payload)
	return b
}

func u64Payload(v uint64) []byte {
	return binary.LittleEndian.AppendUint64(nil, v)
}

// parseU64 decodes a u64 payload.
func parseU64(req Request, p []byte) (uint64, error) {
	if len(p) < 8 {
		return 0, fmt.Errorf("%w: request %d: payload of %d bytes, want a u64", ErrProtocol, req, len(p))
	}
	return binary.LittleEndian.Uint64(p), nil
}

// VringState is the payload of SET_VRING_NUM/BASE/ENABLE and GET_VRING_BASE.
type VringState struct {
	Index uint32
	Num   uint32
}

func parseVringState(req Request, p []byte) (VringState, error) {
	if len(p) < 8 {
		return VringState{}, fmt.Errorf("%w: request %d: payload of %d bytes, want a vring state (8)", ErrProtocol, req, len(p))
	}
	return VringState{Index: binary.LittleEndian.Uint32(p), Num: binary.LittleEndian.Uint32(p[4:])}, nil
}

func (s VringState) bytes() []byte {
	b := binary.LittleEndian.AppendUint32(nil, s.Index)
	return binary.LittleEndian.AppendUint32(b, s.Num)
}

// VringAddr is the payload of SET_VRING_ADDR: the ring addresses in the
// front-end's address space.
type VringAddr struct {
	Index, Flags              uint32
	Desc, Used, Avail, LogAdr uint64
}

func parseVringAddr(p []byte) (VringAddr, error) {
	if len(p) < 40 {
		return VringAddr{}, fmt.Errorf("%w: SET_VRING_ADDR: payload of %d bytes, want 40", ErrProtocol, len(p))
	}
	le := binary.LittleEndian
	return VringAddr{Index: le.Uint32(p), Flags: le.Uint32(p[4:]), Desc: le.Uint64(p[8:]), Used: le.Uint64(p[16:]), Avail: le.Uint64(p[24:]), LogAdr: le.Uint64(p[32:])}, nil
}

// RegionDesc is one entry of SET_MEM_TABLE.
type RegionDesc struct {
	GuestPhys, Size, UserAddr, MmapOffset uint64
}

// maxRegions is VHOST_MEMORY_BASELINE_NREGIONS.
const maxRegions = 8

func parseMemTable(p []byte) ([]RegionDesc, error) {
	if len(p) < 8 {
		return nil, fmt.Errorf("%w: SET_MEM_TABLE: payload of %d bytes", ErrProtocol, len(p))
	}
	n := binary.LittleEndian.Uint32(p)
	if n == 0 || n > maxRegions {
		return nil, fmt.Errorf("%w: SET_MEM_TABLE: %d regions, want 1..%d", ErrProtocol, n, maxRegions)
	}
	if uint64(len(p)) < 8+uint64(n)*32 {
		return nil, fmt.Errorf("%w: SET_MEM_TABLE: %d regions in %d bytes", ErrProtocol, n, len(p))
	}
	rs := make([]RegionDesc, n)
	for i := range rs {
		q := p[8+32*i:]
		le := binary.LittleEndian
		rs[i] = RegionDesc{GuestPhys: le.Uint64(q), Size: le.Uint64(q[8:]), UserAddr: le.Uint64(q[16:]), MmapOffset: le.Uint64(q[24:])}
	}
	return rs, nil
}

// configHeader is the fixed part of GET_CONFIG/SET_CONFIG.
type configHeader struct {
	Offset, Size, Flags uint32
}

// maxConfig bounds a config access (VHOST_USER_MAX_CONFIG_SIZE).
const maxConfig = 256

func parseConfig(req Request, p []byte) (configHeader, []byte, error) {
	if len(p) < 12 {
		return configHeader{}, nil, fmt.Errorf("%w: request %d: config payload of %d bytes", ErrProtocol, req, len(p))
	}
	le := binary.LittleEndian
	c := configHeader{Offset: le.Uint32(p), Size: le.Uint32(p[4:]), Flags: le.Uint32(p[8:])}
	if c.Size > maxConfig || uint64(len(p)) < 12+uint64(c.Size) {
		return configHeader{}, nil, fmt.Errorf("%w: request %d: config of %d bytes in a payload of %d", ErrProtocol, req, c.Size, len(p))
	}
	return c, p[12 : 12+c.Size], nil
}

func (c configHeader) bytes(data []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, c.Offset)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(data)))
	b = binary.LittleEndian.AppendUint32(b, c.Flags)
	return append(b, data...)
}

// vringFD decodes the u64 of SET_VRING_KICK/CALL/ERR: the queue index in
// bits 0-7, bit 8 set when no file descriptor comes with it.
func vringFD(req Request, p []byte) (index int, noFD bool, err error) {
	v, err := parseU64(req, p)
	if err != nil {
		return 0, false, err
	}
	if v&^0x1ff != 0 {
		return 0, false, fmt.Errorf("%w: request %d: reserved bits set in %#x", ErrProtocol, req, v)
	}
	return int(v & 0xff), v&0x100 != 0, nil
}
