package images_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/guestlink/guestlink/core/images"
	"github.com/guestlink/guestlink/errdefs"
)

func ptr(n int64) *int64 { return &n }

// TestBuildReports: a registered build is listed running; a report of a
// new stage starts it (its step counted, its counts reset), counts update
// it; done forgets it at once; failed keeps it listed with its error for
// BuildFailedKept, then it is gone; a build whose client stops reporting
// is failed after BuildSilence (on a fake clock: nothing is waited for).
func TestBuildReports(t *testing.T) {
	s := openStore(t, t.TempDir(), images.Limits{})
	synctest.Test(t, func(t *testing.T) {
		a, err := s.StartBuild("debian-12")
		if err != nil {
			t.Fatal(err)
		}
		if len(a.ID) != 32 || a.Status != images.BuildRunning || a.Step != 0 {
			t.Fatalf("new build %+v", a)
		}
		time.Sleep(time.Second)
		got, err := s.ReportBuild(a.ID, images.BuildReport{Stage: "bootstrap", Lines: ptr(12)})
		if err != nil || got.Stage != "bootstrap" || got.Step != 1 || got.Lines != 12 {
			t.Fatalf("report of a stage: %+v, %v", got, err)
		}
		time.Sleep(2 * time.Second)
		got, _ = s.ReportBuild(a.ID, images.BuildReport{Stage: "bootstrap", Done: ptr(4 << 20), Total: ptr(8 << 20)})
		if got.Step != 1 || got.Lines != 12 || got.Done != 4<<20 || got.Rate() != 2<<20 {
			t.Fatalf("the same stage again: %+v (rate %v, want 2 MiB/s)", got, got.Rate())
		}
		got, _ = s.ReportBuild(a.ID, images.BuildReport{Stage: "filesystem"})
		if got.Step != 2 || got.Done != 0 || got.Total != 0 || got.Lines != 0 || got.Rate() != 0 {
			t.Fatalf("a new stage keeps counts: %+v", got)
		}

		b, _ := s.StartBuild("debian-13")
		if l := s.Builds(); len(l) != 2 || l[0].ID != a.ID || l[1].ID != b.ID {
			t.Fatalf("list %+v, want a then b (oldest first)", l)
		}
		if _, err := s.ReportBuild(a.ID, images.BuildReport{Status: images.BuildDone}); err != nil {
			t.Fatal(err)
		}
		if l := s.Builds(); len(l) != 1 || l[0].ID != b.ID {
			t.Fatalf("a done build stays listed: %+v", l)
		}
		if _, err := s.ReportBuild(a.ID, images.BuildReport{Lines: ptr(1)}); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("report of a forgotten build: %v, want not found", err)
		}

		got, err = s.ReportBuild(b.ID, images.BuildReport{Status: images.BuildFailed, Error: "make: exit status 2"})
		if err != nil || got.Status != images.BuildFailed || got.Error != "make: exit status 2" {
			t.Fatalf("failed report: %+v, %v", got, err)
		}
		if _, err := s.ReportBuild(b.ID, images.BuildReport{Lines: ptr(1)}); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("report of a failed build: %v, want conflict", err)
		}
		time.Sleep(images.BuildFailedKept - time.Second)
		if l := s.Builds(); len(l) != 1 || l[0].Status != images.BuildFailed {
			t.Fatalf("a failed build before BuildFailedKept: %+v", l)
		}
		time.Sleep(time.Second)
		if l := s.Builds(); len(l) != 0 {
			t.Fatalf("a failed build after BuildFailedKept: %+v", l)
		}

		// Silence: a report renews; BuildSilence without one fails it.
		c, _ := s.StartBuild("debian-12")
		time.Sleep(images.BuildSilence - time.Second)
		if _, err := s.ReportBuild(c.ID, images.BuildReport{Lines: ptr(3)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(images.BuildSilence - time.Second)
		if l := s.Builds(); len(l) != 1 || l[0].Status != images.BuildRunning {
			t.Fatalf("a build reported within BuildSilence: %+v", l)
		}
		time.Sleep(time.Second)
		l := s.Builds()
		if len(l) != 1 || l[0].Status != images.BuildFailed || !strings.Contains(l[0].Error, "no report from the client for 30s") {
			t.Fatalf("a silent build: %+v", l)
		}
	})
}

// TestBuildBadReports: what a client cannot register or report, each
// refused as invalid with a message naming it; nothing of the build
// changes.
func TestBuildBadReports(t *testing.T) {
	s := openStore(t, t.TempDir(), images.Limits{})
	for _, name := range []string{"", "-x", "a b", strings.Repeat("a", 300)} {
		if _, err := s.StartBuild(name); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("StartBuild(%q): %v, want invalid", name, err)
		}
	}
	b, err := s.StartBuild("debian-12")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		r    images.BuildReport
		want string
	}{
		{"negative done", images.BuildReport{Done: ptr(-1)}, "done is -1, not a count"},
		{"done over total", images.BuildReport{Done: ptr(10), Total: ptr(5)}, "done 10 is more than total 5"},
		{"control character in stage", images.BuildReport{Stage: "boot\nstrap"}, "a control character at byte 4"},
		{"stage not UTF-8", images.BuildReport{Stage: "\xff"}, "not UTF-8"},
		{"stage too long", images.BuildReport{Stage: strings.Repeat("s", 129)}, "129 bytes, more than 128"},
		{"unknown status", images.BuildReport{Status: "paused"}, `invalid build status "paused": want running, done or failed`},
		{"failed without error", images.BuildReport{Status: images.BuildFailed}, "needs the error"},
		{"error without failed", images.BuildReport{Error: "x"}, "an error goes with status"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.ReportBuild(b.ID, tt.r)
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("%v, want invalid with %q", err, tt.want)
			}
		})
	}
	if l := s.Builds(); len(l) != 1 || l[0].Step != 0 || l[0].Done != 0 || l[0].Status != images.BuildRunning {
		t.Errorf("bad reports changed the build: %+v", l)
	}
}

// TestBuildImportStage: a build in its import stage shows the bytes of
// the store's own import of its name as it copies (growing, of the data
// to copy), while another build of another name in its import stage shows
// none; after the import, the build shows what it was last told.
func TestBuildImportStage(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, filepath.Join(dir, "state"), images.Limits{})
	src := sparseImage(t, filepath.Join(dir, "x.img"), 8<<20, map[int64]int{1 << 20: 7 << 20})
	mine, _ := s.StartBuild("seven")
	other, _ := s.StartBuild("other")
	for _, id := range []string{mine.ID, other.ID} {
		if _, err := s.ReportBuild(id, images.BuildReport{Stage: "import"}); err != nil {
			t.Fatal(err)
		}
	}
	var seen [][]images.BuildProgress
	images.SetCheckHook(s, 1<<20, func() { seen = append(seen, s.Builds()) })
	if _, err := s.Import(context.Background(), src, images.ImportOptions{Alias: "seven"}); err != nil {
		t.Fatal(err)
	}
	if len(seen) < 2 {
		t.Fatalf("%d checks ran, want several", len(seen))
	}
	last := int64(0)
	for i, list := range seen {
		if len(list) != 2 || list[0].ID != mine.ID || list[1].ID != other.ID {
			t.Fatalf("check %d: builds %+v", i, list)
		}
		b := list[0]
		if b.Done <= last || b.Total < 7<<20 || b.Done > b.Total {
			t.Fatalf("check %d: the build's import at %d of %d after %d, want growing", i, b.Done, b.Total, last)
		}
		last = b.Done
		if list[1].Done != 0 || list[1].Total != 0 {
			t.Fatalf("check %d: another build took the import's bytes: %+v", i, list[1])
		}
	}
	if l := s.Builds(); l[0].Done != 0 || l[0].Total != 0 {
		t.Errorf("after the import, the build shows %d of %d", l[0].Done, l[0].Total)
	}
}
