package images

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/guestlink/guestlink/errdefs"
)

// Image builds run in the client (guestlink image build runs make in its
// source tree); the client registers each with the daemon (StartBuild) and
// reports its stage and progress (ReportBuild), so the dashboard and the
// API show it beside the imports. The daemon keeps builds in memory only.
const (
	// BuildSilence is how long a running build may go without a report
	// before the daemon takes its client as gone (killed, its connection
	// ended) and marks it failed. The client reports at least every
	// BuildSilence/6.
	BuildSilence = 30 * time.Second
	// BuildFailedKept is how long a failed build stays listed, with its
	// error, after it failed.
	BuildFailedKept = 5 * time.Minute
	// maxBuilds bounds the builds listed at once (running and failed).
	maxBuilds = 64
	// maxBuildText bounds a build's name and stage (bytes); maxBuildError
	// its error.
	maxBuildText, maxBuildError = 128, 1024
)

// Build states.
const (
	BuildRunning = "running"
	BuildDone    = "done"
	BuildFailed  = "failed"
)

// BuildProgress is one image build as Store.Builds lists it.
type BuildProgress struct {
	// ID names the build in reports (32 hex digits).
	ID string
	// Name is the image being built (its alias, e.g. debian-12).
	Name string
	// Status is BuildRunning or BuildFailed (a done build is forgotten).
	Status string
	// Stage is the stage the build is in ("" before the first); Step is
	// its number from 1.
	Stage string
	Step  int
	// Done and Total count the stage's bytes when it has them (Total 0:
	// unknown); the import stage's come from the store's own import of
	// Name. Lines counts the stage's output lines (it moves while a stage
	// without bytes works).
	Done, Total, Lines int64
	// Error says why the build failed.
	Error string
	// Started is when the build was registered, StageStarted when its
	// stage began, Updated the last report, Ended when it failed.
	Started, StageStarted, Updated, Ended time.Time
}

// Rate is the stage's bytes per second so far (0 without bytes).
func (b BuildProgress) Rate() float64 {
	el := b.Updated.Sub(b.StageStarted).Seconds()
	if b.Done <= 0 || el <= 0 {
		return 0
	}
	return float64(b.Done) / el
}

// BuildReport is what a client reports of its build: its stage (a new
// name starts a new stage), the stage's progress, or its end. A nil or
// empty field keeps what was reported before.
type BuildReport struct {
	Stage              string
	Done, Total, Lines *int64
	// Status BuildDone ends the build (it is forgotten); BuildFailed with
	// Error ends it failed (kept BuildFailedKept).
	Status string
	Error  string
}

// builds is the set of image builds, kept in memory only.
type builds struct {
	mu   sync.Mutex
	list map[string]*BuildProgress
}

// checkBuildText checks a name or stage: printable UTF-8, no longer than
// limit bytes.
func checkBuildText(what, v string, limit int) error {
	if len(v) > limit {
		return fmt.Errorf("invalid build %s: %d bytes, more than %d: %w", what, len(v), limit, errdefs.ErrInvalid)
	}
	if !utf8.ValidString(v) {
		return fmt.Errorf("invalid build %s %q: not UTF-8: %w", what, v, errdefs.ErrInvalid)
	}
	if i := strings.IndexFunc(v, func(r rune) bool { return !unicode.IsPrint(r) }); i >= 0 {
		return fmt.Errorf("invalid build %s %q: a control character at byte %d: %w", what, v, i, errdefs.ErrInvalid)
	}
	return nil
}

// expireLocked marks running builds silent for BuildSilence failed and
// forgets failed ones older than BuildFailedKept.
func (s *Store) expireLocked(now time.Time) {
	for id, b := range s.builds.list {
		switch {
		case b.Status == BuildRunning && now.Sub(b.Updated) >= BuildSilence:
			b.Status, b.Ended = BuildFailed, now
			b.Error = fmt.Sprintf("no report from the client for %s: it is gone (killed, or its connection ended)", BuildSilence)
		case b.Status == BuildFailed && now.Sub(b.Ended) >= BuildFailedKept:
			delete(s.builds.list, id)
		}
	}
}

// StartBuild registers a build of the image name (an alias: ValidateAlias)
// and returns it, running, with its ID. Errors wrap errdefs.ErrInvalid
// (a bad name) or errdefs.ErrConflict (too many builds listed).
func (s *Store) StartBuild(name string) (BuildProgress, error) {
	if err := ValidateAlias(name); err != nil {
		return BuildProgress{}, fmt.Errorf("invalid build name: %w", err)
	}
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	now := s.now()
	b := &BuildProgress{ID: hex.EncodeToString(raw[:]), Name: name, Status: BuildRunning, Started: now, StageStarted: now, Updated: now}
	s.builds.mu.Lock()
	defer s.builds.mu.Unlock()
	s.expireLocked(now)
	if s.builds.list == nil {
		s.builds.list = map[string]*BuildProgress{}
	}
	if len(s.builds.list) >= maxBuilds {
		return BuildProgress{}, fmt.Errorf("%d image builds are listed already (failed ones stay %s): %w", maxBuilds, BuildFailedKept, errdefs.ErrConflict)
	}
	s.builds.list[b.ID] = b
	return *b, nil
}

// ReportBuild applies r to the running build id and returns it. A report
// renews the build (see BuildSilence). Errors wrap errdefs.ErrNotFound
// (no such build, or one forgotten), errdefs.ErrInvalid (a bad report)
// or errdefs.ErrConflict (the build has ended).
func (s *Store) ReportBuild(id string, r BuildReport) (BuildProgress, error) {
	if err := checkBuildText("stage", r.Stage, maxBuildText); err != nil {
		return BuildProgress{}, err
	}
	if err := checkBuildText("error", r.Error, maxBuildError); err != nil {
		return BuildProgress{}, err
	}
	for what, p := range map[string]*int64{"done": r.Done, "total": r.Total, "lines": r.Lines} {
		if p != nil && *p < 0 {
			return BuildProgress{}, fmt.Errorf("invalid build report: %s is %d, not a count: %w", what, *p, errdefs.ErrInvalid)
		}
	}
	if r.Done != nil && r.Total != nil && *r.Total > 0 && *r.Done > *r.Total {
		return BuildProgress{}, fmt.Errorf("invalid build report: done %d is more than total %d: %w", *r.Done, *r.Total, errdefs.ErrInvalid)
	}
	switch r.Status {
	case "", BuildRunning, BuildDone:
		if r.Error != "" {
			return BuildProgress{}, fmt.Errorf("invalid build report: an error goes with status %q only: %w", BuildFailed, errdefs.ErrInvalid)
		}
	case BuildFailed:
		if r.Error == "" {
			return BuildProgress{}, fmt.Errorf("invalid build report: status %q needs the error: %w", BuildFailed, errdefs.ErrInvalid)
		}
	default:
		return BuildProgress{}, fmt.Errorf("invalid build status %q: want %s, %s or %s: %w", r.Status, BuildRunning, BuildDone, BuildFailed, errdefs.ErrInvalid)
	}
	now := s.now()
	s.builds.mu.Lock()
	defer s.builds.mu.Unlock()
	s.expireLocked(now)
	b, ok := s.builds.list[id]
	if !ok {
		return BuildProgress{}, fmt.Errorf("image build %q: %w", id, errdefs.ErrNotFound)
	}
	if b.Status != BuildRunning {
		return BuildProgress{}, fmt.Errorf("image build %q has ended (%s: %s): %w", id, b.Status, b.Error, errdefs.ErrConflict)
	}
	if r.Stage != "" && r.Stage != b.Stage {
		b.Stage, b.Step, b.StageStarted = r.Stage, b.Step+1, now
		b.Done, b.Total, b.Lines = 0, 0, 0
	}
	for _, f := range []struct {
		from *int64
		to   *int64
	}{{r.Done, &b.Done}, {r.Total, &b.Total}, {r.Lines, &b.Lines}} {
		if f.from != nil {
			*f.to = *f.from
		}
	}
	b.Updated = now
	switch r.Status {
	case BuildDone:
		b.Status, b.Ended = BuildDone, now
		delete(s.builds.list, id)
	case BuildFailed:
		b.Status, b.Error, b.Ended = BuildFailed, r.Error, now
	}
	return *b, nil
}

// Builds returns the builds running and those failed in the last
// BuildFailedKept, oldest first: a copy, safe to keep. A build in a stage
// named "import" takes its bytes from the store's import of its name.
func (s *Store) Builds() []BuildProgress {
	now := s.now()
	s.builds.mu.Lock()
	s.expireLocked(now)
	out := make([]BuildProgress, 0, len(s.builds.list))
	for _, b := range s.builds.list {
		out = append(out, *b)
	}
	s.builds.mu.Unlock()
	if len(out) == 0 {
		return out
	}
	imports := s.Imports()
	for i, b := range out {
		if b.Status != BuildRunning || !strings.HasPrefix(b.Stage, "import") {
			continue
		}
		for _, p := range imports {
			if p.Alias == b.Name {
				out[i].Done, out[i].Total, out[i].Updated = p.Done, p.Total, now
			}
		}
	}
	slices.SortFunc(out, func(a, b BuildProgress) int {
		if c := a.Started.Compare(b.Started); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}
