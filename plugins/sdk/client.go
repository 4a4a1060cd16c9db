package sdk

import (
	"context"
	"fmt"
	"math"
	"time"

	backendv1 "github.com/guestlink/guestlink/plugins/sdk/proto/backend/v1"
)

// grpcClient is the daemon-side shim: a Backend that calls a plugin over
// gRPC. Errors come back with their kinds restored (see fromStatus).
type grpcClient struct {
	c       backendv1.BackendClient
	noBatch noBatch // the plugin has no ReadRings
	// noEvBatch: the plugin has no EventBatches
	noEvBatch noEventBatches
}

var (
	_ Backend     = (*grpcClient)(nil)
	_ Snapshotter = (*grpcClient)(nil)
	_ Adopter     = (*grpcClient)(nil)
)

// NewGRPCBackend returns a Backend that calls the plugin service c. Launch
// uses it; it is exported for tests that serve a Backend in-process.
func NewGRPCBackend(c backendv1.BackendClient) Backend {
	return &grpcClient{c: c}
}

func errNilSpec(op string) error {
	return fmt.Errorf("%s: missing guest spec: %w", op, ErrInvalid)
}

func (g *grpcClient) Info(ctx context.Context) (*Info, error) {
	resp, err := g.c.Info(ctx, &backendv1.InfoRequest{})
	if err != nil {
		return nil, fromStatus(ctx, err)
	}
	return infoFromProto(resp), nil
}

func (g *grpcClient) Create(ctx context.Context, spec *GuestSpec) (Handle, error) {
	if spec == nil {
		return nil, errNilSpec("creating guest")
	}
	resp, err := g.c.Create(ctx, &backendv1.CreateRequest{Spec: specToProto(spec)})
	if err != nil {
		return nil, fromStatus(ctx, err)
	}
	return resp.GetHandle(), nil
}

func (g *grpcClient) Start(ctx context.Context, h Handle, spec *GuestSpec) (Handle, *GuestState, error) {
	if spec == nil {
		return nil, nil, errNilSpec("starting guest")
	}
	resp, err := g.c.Start(ctx, &backendv1.StartRequest{Handle: h, Spec: specToProto(spec)})
	if err != nil {
		return nil, nil, fromStatus(ctx, err)
	}
	return resp.GetHandle(), stateFromProto(resp.GetState()), nil
}

func (g *grpcClient) Stop(ctx context.Context, h Handle, opts StopOptions) (*GuestState, error) {
	req := &backendv1.StopRequest{Handle: h, Force: opts.Force, Stateful: opts.Stateful}
	if opts.Timeout > 0 {
		req.TimeoutMs = max(opts.Timeout.Milliseconds(), 1)
	}
	resp, err := g.c.Stop(ctx, req)
	if err != nil {
		return nil, fromStatus(ctx, err)
	}
	return stateFromProto(resp.GetState()), nil
}

func (g *grpcClient) Delete(ctx context.Context, h Handle) error {
	_, err := g.c.Delete(ctx, &backendv1.DeleteRequest{Handle: h})
	return fromStatus(ctx, err)
}

func (g *grpcClient) State(ctx context.Context, h Handle) (*GuestState, error) {
	resp, err := g.c.State(ctx, &backendv1.StateRequest{Handle: h})
	if err != nil {
		return nil, fromStatus(ctx, err)
	}
	return stateFromProto(resp.GetState()), nil
}

// Events opens the plugin's event stream and returns once the plugin has
// subscribed. The channel is closed when ctx ends or the stream breaks (the
// plugin exited); the caller tells the two apart by ctx.Err. The batched
// stream (EventBatches) is used when the plugin has it, else Events.
func (g *grpcClient) Events(ctx context.Context) (<-chan Event, error) {
	if !g.noEvBatch.Load() {
		ch, ok, err := g.eventBatches(ctx)
		if ok {
			return ch, err
		}
		g.noEvBatch.Store(true)
	}
	stream, err := g.c.Events(ctx, &backendv1.EventsRequest{})
	if err != nil {
		return nil, fromStatus(ctx, err)
	}
	// Wait for the headers: the plugin sends them once it subscribed, so no
	// event after Events returned is lost. A stream that ends without
	// headers carries the plugin's error.
	md, err := stream.Header()
	if err == nil && md == nil {
		_, err = stream.Recv()
	}
	if err != nil {
		return nil, fromStatus(ctx, err)
	}
	ch := make(chan Event, 64)
	go func() {
		defer close(ch)
		for {
			p, err := stream.Recv()
			if err != nil {
				return
			}
			select {
			case ch <- eventFromProto(p):
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

func (g *grpcClient) ReadRing(ctx context.Context, h Handle, limit int) ([]byte, error) {
	if limit < 0 {
		return nil, fmt.Errorf("reading ring buffer: negative size %d: %w", limit, ErrInvalid)
	}
	resp, err := g.c.ReadRing(ctx, &backendv1.ReadRingRequest{Handle: h, Max: uint32(min(limit, math.MaxUint32))})
	if err != nil {
		return nil, fromStatus(ctx, err)
	}
	return resp.GetData(), nil
}

// UpdateDevices asks the plugin to change a running guest's devices; a
// plugin without the capability answers ErrNotSupported.
func (g *grpcClient) UpdateDevices(ctx context.Context, h Handle, add map[string]Device, remove []string) error {
	req := &backendv1.UpdateDevicesRequest{Handle: h, Remove: remove}
	if len(add) > 0 {
		req.Add = make(map[string]*backendv1.Device, len(add))
		for name, d := range add {
			req.Add[name] = &backendv1.Device{Config: copyMap(d)}
		}
	}
	if _, err := g.c.UpdateDevices(ctx, req); err != nil {
		return fromStatus(ctx, err)
	}
	return nil
}

var _ DeviceHotplugger = (*grpcClient)(nil)

func (g *grpcClient) LinkEndpoint(ctx context.Context, h Handle) (*LinkEndpoint, error) {
	resp, err := g.c.LinkEndpoint(ctx, &backendv1.LinkEndpointRequest{Handle: h})
	if err != nil {
		return nil, fromStatus(ctx, err)
	}
	return endpointFromProto(resp), nil
}

func (g *grpcClient) Recover(ctx context.Context, h Handle, spec *GuestSpec) (Handle, *GuestState, error) {
	if spec == nil {
		return nil, nil, errNilSpec("recovering guest")
	}
	resp, err := g.c.Recover(ctx, &backendv1.RecoverRequest{Handle: h, Spec: specToProto(spec)})
	if err != nil {
		return nil, nil, fromStatus(ctx, err)
	}
	return resp.GetHandle(), stateFromProto(resp.GetState()), nil
}

func msDuration(ms int64) time.Duration {
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ms) * time.Millisecond
}

// SnapshotCreate calls the plugin; one built without snapshots answers
// ErrNotSupported.
func (g *grpcClient) SnapshotCreate(ctx context.Context, h Handle, name string, stateful bool) (*SnapshotInfo, error) {
	resp, err := g.c.SnapshotCreate(ctx, &backendv1.SnapshotCreateRequest{Handle: h, Snapshot: name, Stateful: stateful})
	if err != nil {
		return nil, fromStatus(ctx, err)
	}
	return snapshotInfoFromProto(resp.GetInfo()), nil
}

// SnapshotRestore calls the plugin.
func (g *grpcClient) SnapshotRestore(ctx context.Context, h Handle, name string, opts RestoreOptions) error {
	_, err := g.c.SnapshotRestore(ctx, &backendv1.SnapshotRestoreRequest{Handle: h, Snapshot: name, Stateful: opts.Stateful, CheckOnly: opts.CheckOnly})
	return fromStatus(ctx, err)
}

// SnapshotDelete calls the plugin.
func (g *grpcClient) SnapshotDelete(ctx context.Context, h Handle, name string) error {
	_, err := g.c.SnapshotDelete(ctx, &backendv1.SnapshotDeleteRequest{Handle: h, Snapshot: name})
	return fromStatus(ctx, err)
}

// SnapshotRename calls the plugin.
func (g *grpcClient) SnapshotRename(ctx context.Context, h Handle, oldName, newName string) error {
	_, err := g.c.SnapshotRename(ctx, &backendv1.SnapshotRenameRequest{Handle: h, Snapshot: oldName, NewName: newName})
	return fromStatus(ctx, err)
}

// Adopt calls the plugin.
func (g *grpcClient) Adopt(ctx context.Context, h Handle, from string, spec *GuestSpec) (Handle, error) {
	if spec == nil {
		return nil, errNilSpec("adopting guest")
	}
	resp, err := g.c.Adopt(ctx, &backendv1.AdoptRequest{Handle: h, FromBackend: from, Spec: specToProto(spec)})
	if err != nil {
		return nil, fromStatus(ctx, err)
	}
	return resp.GetHandle(), nil
}
