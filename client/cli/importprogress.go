package cli

import (
	"context"
	"io"
	"time"

	"github.com/guestlink/guestlink/api"
)

// importPoll is how often a drawing import asks the daemon how far its
// copy is.
var importPoll = 250 * time.Millisecond

// watchImport shows, on w when tty (see drawTransfers), the progress of
// the daemon's import of path (the daemon copies the file itself, so the
// client has no stream to count): it asks list every importPoll for the
// imports in progress and draws the one of path as a transfer (bytes of
// data copied, rate, time left). The returned stop ends the watch and
// clears the bar; it returns once nothing more is drawn. When not tty it
// asks nothing and draws nothing.
func watchImport(ctx context.Context, w io.Writer, tty bool, path string, list func(context.Context) ([]api.ImageImport, error)) (stop func()) {
	if !tty {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		var tr *transfer
		defer func() {
			if tr != nil {
				tr.done()
			}
		}()
		tick := time.NewTicker(importPoll)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			imports, err := list(ctx)
			if err != nil {
				continue // an older daemon, or a hiccup: the import itself says what matters
			}
			for _, p := range imports {
				if p.Path != path {
					continue
				}
				if tr == nil {
					tr = newTransfer(w, true, p.Total, "import "+p.Name)
				}
				tr.set(p.Done)
				break
			}
		}
	}()
	return func() {
		cancel()
		<-finished
	}
}
