// Command fleet is guestlink's fleet backend plugin: thousands of simulated
// guests, each running the real agent, in one host process (see
// docs/fleet.md). Run by the daemon it serves the backend over go-plugin,
// forwarding to the fleet host it starts when a guest needs it; run as
// "fleet host <data dir>" it is that host.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/guestlink/guestlink/plugins/fleet/fleethost"
	"github.com/guestlink/guestlink/plugins/sdk"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == fleethost.Subcommand {
		os.Exit(fleethost.Main(os.Args[2:]))
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet: finding the plugin binary:", err)
		os.Exit(1)
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	p := fleethost.NewProxy(dataDir(), exe)
	sdk.Serve(p)
	p.Close()
}

// dataDir is $GUESTLINK_PLUGIN_DATA_DIR/fleet (the daemon's plugins share
// that directory), else $XDG_RUNTIME_DIR/guestlink-fleet,
// else <tmp>/guestlink-fleet-<uid>.
func dataDir() string {
	if d := os.Getenv(sdk.DataDirEnv); d != "" {
		return filepath.Join(d, "fleet")
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "guestlink-fleet")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("guestlink-fleet-%d", os.Getuid()))
}
