package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
)

// buildReportEvery is how often a build reports to the daemon when its
// stage does not change: well within the daemon's 30 s of silence after
// which it takes the build's client as gone (core/images.BuildSilence).
var buildReportEvery = 5 * time.Second

// buildReporter tells the daemon how an image build the CLI runs is going
// (PATCH /1.0/images/builds/{id}), so the dashboard and GET
// /1.0/images/builds show it: at once when a stage starts, else every
// buildReportEvery with the stage's output lines. A daemon that forgot the
// build (404) or ended it (409) is told nothing more; any other failure
// is retried at the next report. The build never waits for a report.
type buildReporter struct {
	send func(context.Context, api.ImageBuildPatch) error

	mu    sync.Mutex
	stage string
	lines int64
	quit  bool // the daemon no longer knows the build

	kick   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

// startBuildReporter starts reporting through send until end.
func startBuildReporter(ctx context.Context, send func(context.Context, api.ImageBuildPatch) error) *buildReporter {
	ctx, cancel := context.WithCancel(ctx)
	r := &buildReporter{send: send, kick: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	go r.loop(ctx)
	return r
}

// loop sends a report on each kick and every buildReportEvery.
func (r *buildReporter) loop(ctx context.Context) {
	defer close(r.done)
	tick := time.NewTicker(buildReportEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-r.kick:
		}
		r.mu.Lock()
		lines := r.lines
		p := api.ImageBuildPatch{Stage: r.stage, Lines: &lines}
		quit := r.quit
		r.mu.Unlock()
		if quit {
			return
		}
		r.deliver(ctx, p)
	}
}

// deliver sends p; a 404 or 409 stops the reports.
func (r *buildReporter) deliver(ctx context.Context, p api.ImageBuildPatch) {
	err := r.send(ctx, p)
	var se *client.StatusError
	if errors.As(err, &se) && (se.Code == 404 || se.Code == 409) {
		r.mu.Lock()
		r.quit = true
		r.mu.Unlock()
	}
}

// enter reports that the build entered stage name.
func (r *buildReporter) enter(name string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.stage, r.lines = name, 0
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// line counts one output line of the current stage.
func (r *buildReporter) line() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.lines++
	r.mu.Unlock()
}

// end stops the reports and tells the daemon the build's outcome (done,
// or failed with err), within 5 s even when the command's context has
// ended (Ctrl-C).
func (r *buildReporter) end(ctx context.Context, err error) {
	if r == nil {
		return
	}
	r.cancel()
	<-r.done
	r.mu.Lock()
	quit := r.quit
	r.mu.Unlock()
	if quit {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	p := api.ImageBuildPatch{Status: "done"}
	if err != nil {
		p = api.ImageBuildPatch{Status: "failed", Error: reportText(err.Error(), 1000)}
	}
	_ = r.send(ctx, p) // the build's own error is what the user sees
}

// reportText is msg as the daemon takes a build's error: control
// characters (a multi-line message) as spaces, at most limit bytes of
// valid UTF-8.
func reportText(msg string, limit int) string {
	msg = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(msg, "?"))
	if len(msg) > limit {
		msg = strings.ToValidUTF8(msg[:limit-3], "") + "..."
	}
	return msg
}

// imageProgress is what guestlink image progress prints as JSON or YAML:
// the daemon's two lists as they are.
type imageProgress struct {
	Builds  []api.ImageBuild  `json:"builds" yaml:"builds"`
	Imports []api.ImageImport `json:"imports" yaml:"imports"`
}

func (s *session) imageProgressCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "progress",
		Short: "List the image builds and imports in progress (and builds failed lately)",
		Long: `List what the daemon shows on the dashboard's Images page: the image builds
that guestlink image build runs and reports (stage, its output lines or
bytes, or the error of one failed in the last 5 minutes) and the imports the
daemon is copying (bytes copied of the data to copy).`,
		Args: argsExactly(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var p imageProgress
			var err error
			if p.Builds, err = s.client.ImageBuilds(cmd.Context()); err != nil {
				return err
			}
			if p.Imports, err = s.client.ImageImports(cmd.Context()); err != nil {
				return err
			}
			if p.Builds == nil {
				p.Builds = []api.ImageBuild{}
			}
			if p.Imports == nil {
				p.Imports = []api.ImageImport{}
			}
			return s.render(p, func(w io.Writer) error {
				row(w, "KIND", "NAME", "STATUS", "STAGE", "PROGRESS", "STARTED")
				for _, b := range p.Builds {
					stage, progress := "", fmt.Sprintf("%d lines", b.Lines)
					if b.Stage != "" {
						stage = fmt.Sprintf("[%d] %s", b.Step, b.Stage)
					}
					if b.Total > 0 {
						progress = fmt.Sprintf("%s of %s", sizeCell(b.Done), sizeCell(b.Total))
					}
					if b.Status == "failed" {
						progress = b.Error
					}
					row(w, "build", b.Name, b.Status, stage, progress, timeCell(&b.StartedAt))
				}
				for _, im := range p.Imports {
					row(w, "import", im.Name, "running", "", fmt.Sprintf("%s of %s", sizeCell(im.Done), sizeCell(im.Total)), timeCell(&im.StartedAt))
				}
				return nil
			})
		},
	}
}
