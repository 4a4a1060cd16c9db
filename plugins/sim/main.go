// Command sim is guestlink's simulated backend plugin: guests are local
// processes run by simulated VMMs (see docs/sim.md). Run by the daemon it
// serves the backend over go-plugin; run as "sim vmm <guest dir>" it is the
// VMM of one guest.
package main

import (
	"fmt"
	"os"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sim/simbackend"
	"github.com/guestlink/guestlink/plugins/sim/simvm"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == simvm.Subcommand {
		os.Exit(simvm.Main(os.Args[2:]))
	}
	opts, err := simbackend.DefaultOptions()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sim:", err)
		os.Exit(1)
	}
	opts.Logger = sdk.Logger()
	b, err := simbackend.New(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sim:", err)
		os.Exit(1)
	}
	sdk.Serve(b)
	b.Close()
}
