// Command guest-image builds the QEMU test guest (kernel and initramfs) into
// a cache directory, skipping work that is up to date:
//
//	go run ./plugins/qemuvm/guestimage/cmd -out bin/guest
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/guestlink/guestlink/plugins/shared/guestimage"
)

func main() {
	var opts guestimage.Options
	flag.StringVar(&opts.OutDir, "out", "bin/guest", "output (cache) directory")
	flag.StringVar(&opts.SourceDir, "src", ".", "module root; the agent is built from SRC/cmd/guestlink-agent")
	flag.StringVar(&opts.KernelPackage, "kernel-package", "linux-image-cloud-amd64", "kernel meta package to resolve with apt-cache")
	flag.StringVar(&opts.KernelDeb, "kernel-deb", "", "use this kernel .deb instead of downloading one")
	flag.StringVar(&opts.Busybox, "busybox", "/bin/busybox", "static busybox binary")
	flag.Parse()
	opts.Log = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	img, err := guestimage.Build(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "guest-image:", err)
		os.Exit(1)
	}
	fmt.Printf("kernel=%s vmlinux=%s initrd=%s release=%s agent=%v\n", img.Kernel, img.Vmlinux, img.Initrd, img.Release, img.HasAgent)
}
