package sdk

import "google.golang.org/grpc"

// The plugin connection's flow-control windows, the same at both ends
// (Launch's client, Serve's server). Static windows turn off gRPC's
// bandwidth-delay probing, which answers a burst of received data with a
// PING the peer must acknowledge: on a local socket, with nothing to
// learn, two more writes and reads (and their wake-ups) per message at
// each end, the most of what an idle daemon's heartbeat batches and
// health pings cost. 1 MiB holds the largest ring read (MaxReadRing)
// without waiting for a window update.
const (
	streamWindow = 1 << 20
	connWindow   = 4 << 20
)

// windowDialOptions are Launch's client side of the windows.
func windowDialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(streamWindow), grpc.WithInitialConnWindowSize(connWindow)}
}

// windowServerOptions are Serve's server side of the windows.
func windowServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.InitialWindowSize(streamWindow), grpc.InitialConnWindowSize(connWindow)}
}
