// Command guestlinkd is the guestlink daemon. It runs in the foreground until
// SIGTERM or SIGINT; guests keep running after it stops and are recovered by
// the next start.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/guestlink/guestlink/core/agentmon"
	"github.com/guestlink/guestlink/core/statebudget"
	"github.com/guestlink/guestlink/core/storage"
	"github.com/guestlink/guestlink/daemon"
	"github.com/guestlink/guestlink/internal/flagfile"
	"github.com/guestlink/guestlink/internal/sdnotify"
)

func main() {
	var cfg daemon.Config
	var level string
	flag.StringVar(&cfg.StateDir, "state-dir", os.Getenv("GUESTLINK_STATE_DIR"), "state directory: database, admin socket (guestlink.sock), keys (env GUESTLINK_STATE_DIR)")
	flag.StringVar(&cfg.HTTPAddr, "http", "", "also serve the admin API and the dashboard on plain HTTP on this loopback address, e.g. 127.0.0.1:8080 (every request is authenticated)")
	flag.StringVar(&cfg.HTTPSAddr, "https", "", "also serve the admin API and the dashboard over TLS on this address, e.g. 0.0.0.0:8443 (every request is authenticated)")
	flag.StringVar(&cfg.TLSCert, "tls-cert", "", "certificate (PEM) of --https (default: a self-signed one under the state dir)")
	flag.StringVar(&cfg.TLSKey, "tls-key", "", "private key (PEM) of --tls-cert")
	flag.Func("http-host", "a DNS name the Host header of TCP requests may give besides localhost and the listener's address (repeatable)", func(v string) error {
		cfg.HTTPHosts = append(cfg.HTTPHosts, v)
		return nil
	})
	var databaseFile, joinFile string
	flag.StringVar(&cfg.DatabaseURL, "database", "", "database URL: sqlite://PATH (default DIR/guestlink.db) or postgres://... (env "+envDatabaseURL+"); one with a password is visible in ps here: use --database-file or the env")
	flag.StringVar(&databaseFile, "database-file", "", "read the database URL from this file (mode 0600 or 0400, owned by this user or root), keeping its password out of ps")
	flag.StringVar(&cfg.PluginDir, "plugin-dir", defaultPluginDir(), "directory of backend plugins and their SHA256SUMS")
	flag.StringVar(&cfg.DefaultBackend, "default-backend", "sim", "backend of instances launched without one")
	flag.BoolVar(&cfg.AllowDiskPaths, "allow-disk-paths", false, "let disk devices take a host path as source (default: storage pool volumes only)")
	flag.Func("image-max-size", "largest image file an import takes, e.g. 64GiB, 512MiB (apparent size: holes count; default 64GiB)", func(v string) (err error) {
		cfg.ImageMaxSize, err = storage.ParseSize(v)
		return err
	})
	flag.Func("devlxd-kept-memory", "memory the guests' idle kept-alive devlxd connections may hold together, e.g. 64MiB (counted at 32KiB each; past it the one idle the longest is closed and its guest resumes TLS on a new one; 0 keeps none; default 64MiB)", func(v string) error {
		n, err := parseKeptMemory(v)
		cfg.DevlxdKeptMemory = n
		return err
	})
	flag.StringVar(&level, "log-level", "info", "log level: debug, info, warn, error")
	flag.Float64Var(&cfg.GuestRingBytes, "guest-ring-bytes", agentmon.DefaultRingBytesPerSecond, "ring-buffer bytes read per second from each guest; a guest writing more is throttled")
	flag.Float64Var(&cfg.GuestRingLines, "guest-ring-lines", agentmon.DefaultRingLinesPerSecond, "ring-buffer lines read per second from each guest; a guest writing more is throttled")
	flag.Float64Var(&cfg.GuestStateChanges, "guest-state-changes", statebudget.DefaultRate, "agent and Ready state changes per second from each guest (devlxd, ring words and its reboots together; bursts of twice that); more are held back, the last one applied (reboots over it are counted, not recorded)")
	flag.IntVar(&cfg.APILimits.MaxInFlight, "api-max-requests", 0, "admin API requests served at once, more wait briefly then get 503 (default 8 x GOMAXPROCS)")
	flag.IntVar(&cfg.APILimits.MaxLists, "api-max-lists", 0, "instance lists served at once, apart from the other requests (default 2 x GOMAXPROCS)")
	flag.StringVar(&cfg.Cluster.Name, "name", os.Getenv("GUESTLINK_NAME"), "this daemon's name as a cluster member (default: the host name; env GUESTLINK_NAME)")
	flag.StringVar(&cfg.Cluster.Address, "cluster-address", os.Getenv("GUESTLINK_CLUSTER_ADDRESS"), "HOST:PORT other cluster members reach this one on (mutual TLS; PostgreSQL only; env GUESTLINK_CLUSTER_ADDRESS)")
	flag.StringVar(&cfg.Cluster.Join, "join", "", "join the cluster of --database with this one-time token from `guestlink cluster add NAME` (env "+envJoin+"); visible in ps here: use --join-file or the env")
	flag.StringVar(&joinFile, "join-file", "", "read the --join token from this file (mode 0600 or 0400, owned by this user or root), keeping it out of ps")
	flag.DurationVar(&cfg.Cluster.Heartbeat, "cluster-heartbeat", 0, "how often this member records its heartbeat (default 3s)")
	flag.DurationVar(&cfg.Cluster.OfflineAfter, "cluster-offline-after", 0, "heartbeat age after which a member is offline (default 12s)")
	flag.DurationVar(&cfg.Cluster.ForwardTimeout, "cluster-forward-timeout", 0, "how long a request forwarded to another member may take before it is answered 503 (default 30s; plus the request's own timeout)")
	flag.IntVar(&cfg.TCPLimits.MaxConns, "http-max-conns", 0, "TCP connections (--http, --https, --cluster-address) open at once; more are closed at accept (default: half the open-file limit the guests' links leave, at most 4096)")
	flag.IntVar(&cfg.TCPLimits.MaxPerPeer, "http-max-conns-per-peer", 0, "TCP connections open at once from one IP address (default a quarter of --http-max-conns, at least 64)")
	flag.DurationVar(&cfg.TCPLimits.FirstRequest, "http-first-request-timeout", 0, "time a new TCP connection has to finish its TLS handshake and send its first request header (default 10s)")
	flag.DurationVar(&cfg.WriteTimeout, "write-timeout", 0, "how long one write to a client of the admin API, the dashboard or the cluster listener may block before the client is dropped (default 30s)")
	configFile := flag.String("config", "", "YAML file setting flags by name (e.g. /etc/guestlink/guestlinkd.yaml: \"http: 127.0.0.1:8080\"); the command line and the environment win over it")
	flag.Parse()
	if flag.NArg() > 0 {
		fail(fmt.Errorf("unexpected argument %q", flag.Arg(0)))
	}
	secrets := []secretSetting{
		{name: "database", env: envDatabaseURL, value: &cfg.DatabaseURL, file: &databaseFile, secret: databaseSecret},
		{name: "join", env: envJoin, value: &cfg.Cluster.Join, file: &joinFile, secret: joinSecret},
	}
	cmdline := visited()
	if *configFile != "" {
		err := flagfile.Apply(flag.CommandLine, *configFile, flagfile.Options{
			Env: map[string]string{"state-dir": "GUESTLINK_STATE_DIR", "name": "GUESTLINK_NAME",
				"cluster-address": "GUESTLINK_CLUSTER_ADDRESS",
				"join":            envJoin, "join-file": envJoin,
				"database": envDatabaseURL, "database-file": envDatabaseURL},
			Repeatable: map[string]bool{"http-host": true},
			Skip:       map[string]bool{"config": true},
			Secret: func(key, v string) bool {
				return (key == "database" && databaseSecret(v)) || (key == "join" && joinSecret(v))
			},
		})
		if err != nil {
			fail(err)
		}
	}
	var warnings []string
	set := visited()
	for _, s := range secrets {
		w, err := s.resolve(cmdline, set)
		if err != nil {
			fail(err)
		}
		if w != "" {
			warnings = append(warnings, w)
		}
		// Plugins and guests inherit the daemon's environment.
		_ = os.Unsetenv(s.env)
	}
	if cfg.StateDir == "" {
		fail(fmt.Errorf("--state-dir is required"))
	}
	if cfg.TCPLimits.MaxConns < 0 || cfg.TCPLimits.MaxPerPeer < 0 || cfg.TCPLimits.FirstRequest < 0 || cfg.WriteTimeout < 0 {
		fail(fmt.Errorf("--http-max-conns, --http-max-conns-per-peer, --http-first-request-timeout and --write-timeout must be positive (0: the default)"))
	}
	if cfg.APILimits.MaxInFlight < 0 || cfg.APILimits.MaxLists < 0 {
		fail(fmt.Errorf("--api-max-requests and --api-max-lists must be positive (0: the default)"))
	}
	if err := cfg.LogLevel.UnmarshalText([]byte(level)); err != nil {
		fail(fmt.Errorf("--log-level %q: %w", level, err))
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	for _, w := range warnings {
		cfg.Logger.Warn(w)
	}
	if err := startPprof(); err != nil {
		fail(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The plugins and their guests must not inherit systemd's socket.
	notifySocket := os.Getenv(sdnotify.EnvSocket)
	_ = os.Unsetenv(sdnotify.EnvSocket)
	d, err := daemon.Start(ctx, cfg)
	if err != nil {
		fail(err)
	}
	// Start returned: the admin socket answers. A Type=notify unit is up.
	if _, err := sdnotify.NotifySocket(notifySocket, sdnotify.Ready); err != nil {
		cfg.Logger.Warn("telling systemd the daemon is ready", "err", err)
	}
	if err := d.Wait(ctx); err != nil {
		fail(err)
	}
}

// visited returns the names of the flags set so far.
// parseKeptMemory reads --devlxd-kept-memory: a size, or 0 for none kept
// (daemon.Config.DevlxdKeptMemory's negative value).
func parseKeptMemory(v string) (int64, error) {
	if strings.TrimSpace(v) == "0" {
		return -1, nil
	}
	return storage.ParseSize(v)
}

func visited() map[string]bool {
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// defaultPluginDir is bin/plugins next to the guestlinkd binary.
func defaultPluginDir() string {
	exe, err := os.Executable()
	if err != nil {
		return "bin/plugins"
	}
	return filepath.Join(filepath.Dir(exe), "plugins")
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "guestlinkd: %v\n", err)
	os.Exit(1)
}
