package sdk

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	backendv1 "github.com/guestlink/guestlink/plugins/sdk/proto/backend/v1"
)

// noBatch is set once a plugin answered ReadRings with Unimplemented: it
// was built before the call existed.
type noBatch struct{ atomic.Bool }

// ReadRings implements RingBatchReader over gRPC; against a plugin without
// the call it reads one ring per call.
func (g *grpcClient) ReadRings(ctx context.Context, reads []RingRead) ([]RingData, error) {
	if len(reads) > MaxRingReads {
		return nil, fmt.Errorf("reading ring buffers: %d reads, at most %d: %w", len(reads), MaxRingReads, ErrInvalid)
	}
	if !g.noBatch.Load() {
		req := &backendv1.ReadRingsRequest{Reads: make([]*backendv1.ReadRingRequest, len(reads))}
		for i, r := range reads {
			if r.Max < 0 {
				return nil, fmt.Errorf("reading ring buffer: negative size %d: %w", r.Max, ErrInvalid)
			}
			req.Reads[i] = &backendv1.ReadRingRequest{Handle: r.Handle, Max: uint32(min(r.Max, math.MaxUint32))}
		}
		resp, err := g.c.ReadRings(ctx, req)
		if status.Code(err) == codes.Unimplemented {
			g.noBatch.Store(true)
		} else if err != nil {
			return nil, fromStatus(ctx, err)
		} else {
			if len(resp.GetResults()) != len(reads) {
				return nil, fmt.Errorf("reading ring buffers: the plugin answered %d results for %d reads: %w", len(resp.GetResults()), len(reads), ErrUnavailable)
			}
			out := make([]RingData, len(reads))
			for i, r := range resp.GetResults() {
				if c := codes.Code(r.GetCode()); c != codes.OK {
					out[i].Err = fromStatus(ctx, status.Error(c, r.GetMessage()))
					continue
				}
				out[i].Data = r.GetData()
			}
			return out, nil
		}
	}
	out := make([]RingData, len(reads))
	for i, r := range reads {
		out[i].Data, out[i].Err = g.ReadRing(ctx, r.Handle, r.Max)
	}
	return out, nil
}

var _ RingBatchReader = (*grpcClient)(nil)

// ReadRings serves a batch with the backend's own ReadRings when it has
// one, else with one ReadRing per read; each read is capped at MaxReadRing
// bytes.
func (s *grpcServer) ReadRings(ctx context.Context, req *backendv1.ReadRingsRequest) (*backendv1.ReadRingsResponse, error) {
	if n := len(req.GetReads()); n > MaxRingReads {
		return nil, toStatus(fmt.Errorf("reading ring buffers: %d reads, at most %d: %w", n, MaxRingReads, ErrInvalid))
	}
	reads := make([]RingRead, len(req.GetReads()))
	for i, r := range req.GetReads() {
		reads[i] = RingRead{Handle: Handle(r.GetHandle()), Max: int(min(r.GetMax(), MaxReadRing))}
	}
	res := ReadRings(ctx, s.impl, reads)
	resp := &backendv1.ReadRingsResponse{Results: make([]*backendv1.RingResult, len(res))}
	for i, r := range res {
		out := &backendv1.RingResult{}
		if r.Err != nil {
			st, _ := status.FromError(toStatus(r.Err))
			out.Code, out.Message = uint32(st.Code()), st.Message()
		} else {
			if len(r.Data) > reads[i].Max {
				r.Data = r.Data[:reads[i].Max]
			}
			out.Data = r.Data
		}
		resp.Results[i] = out
	}
	return resp, nil
}
