// Command guestlink is the command-line client of the guestlink daemon.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/guestlink/guestlink/client/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
