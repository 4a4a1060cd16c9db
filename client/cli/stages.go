package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
)

// StageMarker starts a line a build script prints when it enters a stage
// ("guestlink-stage: bootstrap"); image build shows it as progress.
const StageMarker = "guestlink-stage: "

// stages shows the stages of a long job. On a terminal it is one line
// redrawn in place (stage, its number, the time spent: a progressbar
// spinner) and the job's own output goes to a log kept for a failure; when
// the output is not a terminal the job's output passes through unchanged
// (a CI log keeps every line) and no progress is drawn.
type stages struct {
	w     io.Writer
	tty   bool
	n     int
	name  string
	start time.Time // of the current stage
	bar   *progressbar.ProgressBar
	log   *os.File       // the job's output on a terminal; nil when passed through
	rep   *buildReporter // told of each stage and line (nil: nobody)
}

// newStages shows stages on w; tty says whether to draw (isTerminal).
func newStages(w io.Writer, tty bool) (*stages, error) {
	s := &stages{w: w, tty: tty}
	if tty {
		f, err := os.CreateTemp("", "guestlink-build-*.log")
		if err != nil {
			return nil, fmt.Errorf("creating the build log: %w", err)
		}
		s.log = f
	}
	return s, nil
}

// enter ends the current stage (printing its time) and starts name.
func (s *stages) enter(name string) {
	s.finish(false)
	s.n++
	s.name, s.start = name, time.Now()
	s.rep.enter(reportText(name, 128))
	if !s.tty {
		return
	}
	s.bar = progressbar.NewOptions(-1,
		progressbar.OptionSetWriter(s.w),
		progressbar.OptionSetDescription(fmt.Sprintf("[%d] %s", s.n, name)),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionShowCount(),
		progressbar.OptionSetRenderBlankState(true),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
}

// line takes one line of the job's output: a stage marker enters that
// stage; any other line is logged (terminal) or passed through.
func (s *stages) line(text string) {
	if name, ok := strings.CutPrefix(text, StageMarker); ok {
		s.enter(strings.TrimSpace(name))
		return
	}
	s.rep.line()
	if !s.tty {
		fmt.Fprintln(s.w, text)
		return
	}
	fmt.Fprintln(s.log, text)
	if s.bar != nil {
		s.bar.Add(1) // the count of output lines: it moves while the stage works
	}
}

// finish ends the current stage, printing its name and time on a
// terminal (and that it failed, if failed).
func (s *stages) finish(failed bool) {
	if s.name == "" {
		return
	}
	if s.tty {
		if s.bar != nil {
			s.bar.Finish() // clears the line (OptionClearOnFinish) and ends its spinner goroutine
			s.bar = nil
		}
		outcome := ""
		if failed {
			outcome = "failed after "
		}
		fmt.Fprintf(s.w, "[%d] %s: %s%s\n", s.n, s.name, outcome, time.Since(s.start).Round(time.Second))
	}
	s.name = ""
}

// run copies r line by line into the stages until EOF.
func (s *stages) run(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		s.line(sc.Text())
	}
	return sc.Err()
}

// close ends the last stage. On failure it prints the log's last lines and
// keeps it (its path is in the message); on success it removes it.
func (s *stages) close(failed bool) {
	s.finish(failed)
	if s.log == nil {
		return
	}
	s.log.Close()
	if !failed {
		os.Remove(s.log.Name())
		return
	}
	if b, err := os.ReadFile(s.log.Name()); err == nil {
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 30 {
			lines = lines[len(lines)-30:]
		}
		fmt.Fprintf(s.w, "%s\n(the whole output: %s)\n", strings.Join(lines, "\n"), s.log.Name())
	}
}
