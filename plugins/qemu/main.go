// Command qemu is the guestlink backend plugin that runs guests under QEMU
// with the current layout: com.canonical.lxd wired to the ring buffer, org.linuxcontainers.lxd unwired. The daemon runs it; see docs/qemu.md.
package main

import (
	"fmt"
	"os"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/shared/qemuvm"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	qemuvm.MaybeRunVsockd() // a guest's vsock device: the plugin binary re-executed (docs/vsock.md)
	opts := qemuvm.OptionsFromEnv("qemu", qemuvm.LayoutCurrent)
	opts.Version = version
	opts.Logger = sdk.Logger()
	b, err := qemuvm.New(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sdk.Serve(b)
}
