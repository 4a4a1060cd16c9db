package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
)

// pprofEnv names a loopback address on which guestlinkd serves Go's
// profiler (/debug/pprof/) for benchmarks (make bench-fleet). Unset: off.
const pprofEnv = "GUESTLINK_DEBUG_PPROF"

// startPprof serves the profiler when pprofEnv names a loopback address;
// anything else is refused, as the profiler is not authenticated.
func startPprof() error {
	addr := os.Getenv(pprofEnv)
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s=%q: %w", pprofEnv, addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%s=%q: the profiler listens on a loopback IP address only", pprofEnv, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: %w", pprofEnv, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace) // every wake-up, for idle work a profile's 100 Hz misses
	slog.Warn("serving the Go profiler", "addr", ln.Addr().String())
	go func() { _ = http.Serve(ln, mux) }()
	return nil
}
