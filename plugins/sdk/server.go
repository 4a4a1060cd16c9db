package sdk

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	backendv1 "github.com/guestlink/guestlink/plugins/sdk/proto/backend/v1"
)

// MaxReadRing is the most bytes one ReadRing call transfers; larger requests
// are clamped so a response always fits in a gRPC message.
const MaxReadRing = 1 << 20

// grpcServer is the plugin-side shim: it serves the protobuf service by
// calling a Backend.
type grpcServer struct {
	backendv1.UnimplementedBackendServer
	impl Backend
	log  hclog.Logger
}

var _ backendv1.BackendServer = (*grpcServer)(nil)

func errMissingSpec() error {
	return status.Error(codes.InvalidArgument, "missing guest spec: invalid argument")
}

func (s *grpcServer) Info(ctx context.Context, _ *backendv1.InfoRequest) (*backendv1.InfoResponse, error) {
	info, err := s.impl.Info(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return infoToProto(info), nil
}

func (s *grpcServer) Create(ctx context.Context, req *backendv1.CreateRequest) (*backendv1.CreateResponse, error) {
	if req.GetSpec() == nil {
		return nil, errMissingSpec()
	}
	h, err := s.impl.Create(ctx, specFromProto(req.GetSpec()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &backendv1.CreateResponse{Handle: h}, nil
}

func (s *grpcServer) Start(ctx context.Context, req *backendv1.StartRequest) (*backendv1.StartResponse, error) {
	if req.GetSpec() == nil {
		return nil, errMissingSpec()
	}
	h, st, err := s.impl.Start(ctx, Handle(req.GetHandle()), specFromProto(req.GetSpec()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &backendv1.StartResponse{Handle: h, State: stateToProto(st)}, nil
}

func (s *grpcServer) Stop(ctx context.Context, req *backendv1.StopRequest) (*backendv1.StopResponse, error) {
	opts := StopOptions{Force: req.GetForce(), Stateful: req.GetStateful()}
	if ms := req.GetTimeoutMs(); ms > 0 {
		opts.Timeout = msDuration(ms)
	}
	st, err := s.impl.Stop(ctx, Handle(req.GetHandle()), opts)
	if err != nil {
		return nil, toStatus(err)
	}
	return &backendv1.StopResponse{State: stateToProto(st)}, nil
}

func (s *grpcServer) Delete(ctx context.Context, req *backendv1.DeleteRequest) (*backendv1.DeleteResponse, error) {
	if err := s.impl.Delete(ctx, Handle(req.GetHandle())); err != nil {
		return nil, toStatus(err)
	}
	return &backendv1.DeleteResponse{}, nil
}

func (s *grpcServer) State(ctx context.Context, req *backendv1.StateRequest) (*backendv1.StateResponse, error) {
	st, err := s.impl.State(ctx, Handle(req.GetHandle()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &backendv1.StateResponse{State: stateToProto(st)}, nil
}

func (s *grpcServer) Events(_ *backendv1.EventsRequest, stream grpc.ServerStreamingServer[backendv1.Event]) error {
	ctx := stream.Context()
	ch, stop, err := s.subscribe(stream)
	if err != nil {
		return err
	}
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return toStatus(ctx.Err())
		case ev, ok := <-ch:
			if !ok {
				return nil
			}
			if err := stream.Send(eventToProto(ev)); err != nil {
				return err
			}
		}
	}
}

// UpdateDevices calls the backend's DeviceHotplugger, or answers
// Unimplemented for a backend without one.
func (s *grpcServer) UpdateDevices(ctx context.Context, req *backendv1.UpdateDevicesRequest) (*backendv1.UpdateDevicesResponse, error) {
	hp, ok := s.impl.(DeviceHotplugger)
	if !ok {
		return nil, toStatus(fmt.Errorf("this backend cannot hot-plug devices (no capability %q): %w", CapHotplug, ErrNotSupported))
	}
	add := make(map[string]Device, len(req.GetAdd()))
	for name, d := range req.GetAdd() {
		add[name] = Device(copyMap(d.GetConfig()))
	}
	if err := hp.UpdateDevices(ctx, Handle(req.GetHandle()), add, req.GetRemove()); err != nil {
		return nil, toStatus(err)
	}
	return &backendv1.UpdateDevicesResponse{}, nil
}

func (s *grpcServer) ReadRing(ctx context.Context, req *backendv1.ReadRingRequest) (*backendv1.ReadRingResponse, error) {
	limit := int(min(req.GetMax(), MaxReadRing))
	data, err := s.impl.ReadRing(ctx, Handle(req.GetHandle()), limit)
	if err != nil {
		return nil, toStatus(err)
	}
	if len(data) > limit {
		data = data[:limit]
	}
	return &backendv1.ReadRingResponse{Data: data}, nil
}

func (s *grpcServer) LinkEndpoint(ctx context.Context, req *backendv1.LinkEndpointRequest) (*backendv1.LinkEndpointResponse, error) {
	ep, err := s.impl.LinkEndpoint(ctx, Handle(req.GetHandle()))
	if err != nil {
		return nil, toStatus(err)
	}
	return endpointToProto(ep), nil
}

func (s *grpcServer) Recover(ctx context.Context, req *backendv1.RecoverRequest) (*backendv1.RecoverResponse, error) {
	if req.GetSpec() == nil {
		return nil, errMissingSpec()
	}
	h, st, err := s.impl.Recover(ctx, Handle(req.GetHandle()), specFromProto(req.GetSpec()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &backendv1.RecoverResponse{Handle: h, State: stateToProto(st)}, nil
}

// snapshotter returns the backend's Snapshotter or the Unimplemented
// status a backend without snapshots answers.
func (s *grpcServer) snapshotter() (Snapshotter, error) {
	if sn, ok := s.impl.(Snapshotter); ok {
		return sn, nil
	}
	return nil, status.Error(codes.Unimplemented, "this backend takes no snapshots (it does not implement "+string(CapSnapshot)+"): not supported")
}

func (s *grpcServer) SnapshotCreate(ctx context.Context, req *backendv1.SnapshotCreateRequest) (*backendv1.SnapshotCreateResponse, error) {
	sn, err := s.snapshotter()
	if err != nil {
		return nil, err
	}
	info, err := sn.SnapshotCreate(ctx, Handle(req.GetHandle()), req.GetSnapshot(), req.GetStateful())
	if err != nil {
		return nil, toStatus(err)
	}
	return &backendv1.SnapshotCreateResponse{Info: snapshotInfoToProto(info)}, nil
}

func (s *grpcServer) SnapshotRestore(ctx context.Context, req *backendv1.SnapshotRestoreRequest) (*backendv1.SnapshotRestoreResponse, error) {
	sn, err := s.snapshotter()
	if err != nil {
		return nil, err
	}
	opts := RestoreOptions{Stateful: req.GetStateful(), CheckOnly: req.GetCheckOnly()}
	if err := sn.SnapshotRestore(ctx, Handle(req.GetHandle()), req.GetSnapshot(), opts); err != nil {
		return nil, toStatus(err)
	}
	return &backendv1.SnapshotRestoreResponse{}, nil
}

func (s *grpcServer) SnapshotDelete(ctx context.Context, req *backendv1.SnapshotDeleteRequest) (*backendv1.SnapshotDeleteResponse, error) {
	sn, err := s.snapshotter()
	if err != nil {
		return nil, err
	}
	if err := sn.SnapshotDelete(ctx, Handle(req.GetHandle()), req.GetSnapshot()); err != nil {
		return nil, toStatus(err)
	}
	return &backendv1.SnapshotDeleteResponse{}, nil
}

func (s *grpcServer) SnapshotRename(ctx context.Context, req *backendv1.SnapshotRenameRequest) (*backendv1.SnapshotRenameResponse, error) {
	sn, err := s.snapshotter()
	if err != nil {
		return nil, err
	}
	if err := sn.SnapshotRename(ctx, Handle(req.GetHandle()), req.GetSnapshot(), req.GetNewName()); err != nil {
		return nil, toStatus(err)
	}
	return &backendv1.SnapshotRenameResponse{}, nil
}

func (s *grpcServer) Adopt(ctx context.Context, req *backendv1.AdoptRequest) (*backendv1.AdoptResponse, error) {
	a, ok := s.impl.(Adopter)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this backend takes no guests of other backends (it does not implement "+string(CapMove)+"): not supported")
	}
	if req.GetSpec() == nil {
		return nil, errMissingSpec()
	}
	h, err := a.Adopt(ctx, Handle(req.GetHandle()), req.GetFromBackend(), specFromProto(req.GetSpec()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &backendv1.AdoptResponse{Handle: h}, nil
}

// recoverUnary turns a panic in a Backend method into a codes.Internal error
// (logged with its stack) instead of killing the plugin process and every
// call in flight with it.
func recoverUnary(log hclog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				log.Error("panic in backend method", "method", info.FullMethod, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				err = status.Errorf(codes.Internal, "panic in %s: %v", info.FullMethod, r)
			}
		}()
		return handler(ctx, req)
	}
}

// recoverStream is recoverUnary for streaming methods.
func recoverStream(log hclog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				log.Error("panic in backend method", "method", info.FullMethod, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				err = status.Errorf(codes.Internal, "panic in %s: %v", info.FullMethod, r)
			}
		}()
		return handler(srv, ss)
	}
}
