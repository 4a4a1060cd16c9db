package sdk

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	backendv1 "github.com/guestlink/guestlink/plugins/sdk/proto/backend/v1"
)

// ProtocolVersion is the go-plugin protocol version: the major version of the
// protobuf package guestlink.backend.v1.
const ProtocolVersion = 1

// PluginName is the key of the backend plugin in go-plugin's plugin map.
const PluginName = "backend"

// LogLevelEnv names the environment variable that sets a plugin's log level
// (trace, debug, info, warn, error). Launch sets it from the host's logger.
const LogLevelEnv = "GUESTLINK_PLUGIN_LOG_LEVEL"

// Handshake is the go-plugin handshake shared by the daemon and every backend
// plugin. A binary started without the magic cookie in its environment is
// not being run as a plugin and says so instead of serving.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "GUESTLINK_PLUGIN",
	MagicCookieValue: "7f1c2b9e4d6a4e0f9a35c8d1b2e7f604",
}

// PluginSet returns the go-plugin plugin map with the backend plugin under
// PluginName. impl is served by plugins and nil on the daemon side.
func PluginSet(impl Backend) plugin.PluginSet {
	return plugin.PluginSet{PluginName: &GRPCPlugin{Impl: impl}}
}

// GRPCPlugin is the go-plugin glue for Backend: it registers the gRPC server
// shim in the plugin and builds the client shim in the daemon. It supports
// gRPC only.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl is the Backend served by a plugin process; unused by clients.
	Impl Backend
}

var _ plugin.GRPCPlugin = (*GRPCPlugin)(nil)

// GRPCServer registers the Backend service on s.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	backendv1.RegisterBackendServer(s, &grpcServer{impl: p.Impl, log: Logger()})
	return nil
}

// GRPCClient returns a Backend that calls the plugin over conn.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return NewGRPCBackend(backendv1.NewBackendClient(conn)), nil
}

var (
	loggerOnce sync.Once
	logger     hclog.Logger
)

// Logger returns the plugin's logger: JSON lines on stderr, which go-plugin
// parses in the daemon and re-logs with their levels under the plugin's
// name. Plugins log through it and never write to stdout.
func Logger() hclog.Logger {
	loggerOnce.Do(func() {
		level := hclog.LevelFromString(os.Getenv(LogLevelEnv))
		if level == hclog.NoLevel {
			level = hclog.Info
		}
		logger = hclog.New(&hclog.LoggerOptions{
			Level:      level,
			Output:     os.Stderr,
			JSONFormat: true,
		})
	})
	return logger
}

// Serve runs b as a plugin process and returns when the daemon tells the
// plugin to exit. It serves gRPC only and exits the process when its parent
// (the daemon) dies, so a daemon killed with SIGKILL leaves no plugin behind;
// guests that must survive are the plugin's to start in sessions of their
// own. Run without the daemon (no magic cookie), Serve prints a short notice
// to stderr and exits with status 1.
func Serve(b Backend) {
	log := Logger()
	if os.Getenv(Handshake.MagicCookieKey) != Handshake.MagicCookieValue {
		os.Stderr.WriteString("This binary is a guestlink backend plugin; the guestlink daemon runs it.\n")
		os.Exit(1)
	}
	go watchParent(os.Getppid(), time.Second/2, func() {
		log.Warn("daemon exited, plugin exits too")
		os.Exit(2)
	})
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         PluginSet(b),
		Logger:          log,
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			opts = append(opts, windowServerOptions()...)
			opts = append(opts,
				grpc.ChainUnaryInterceptor(recoverUnary(log)),
				grpc.ChainStreamInterceptor(recoverStream(log)))
			return grpc.NewServer(opts...)
		},
	})
}

// watchParent calls gone once the process's parent is no longer ppid (the
// process was re-parented because its parent died).
func watchParent(ppid int, every time.Duration, gone func()) {
	if ppid <= 1 {
		return // started by init or a subreaper: nothing to watch
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for range t.C {
		if os.Getppid() != ppid {
			gone()
			return
		}
	}
}
