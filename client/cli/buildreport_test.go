package cli

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
)

// sentReports records what a reporter sends; fail, when set, answers
// every send from then on.
type sentReports struct {
	mu   sync.Mutex
	list []api.ImageBuildPatch
	fail error
}

func (s *sentReports) send(_ context.Context, p api.ImageBuildPatch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list = append(s.list, p)
	return s.fail
}

func (s *sentReports) take() []api.ImageBuildPatch {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.list
	s.list = nil
	return out
}

// TestBuildReporter (on a fake clock): a stage is reported at once with
// its lines reset; lines are counted into the next report, sent every
// buildReportEvery while nothing changes; end reports done, or failed with
// the error on one line; a daemon that forgot the build (404) is sent
// nothing more, not even the end; a nil reporter (a daemon that takes no
// builds) does nothing.
func TestBuildReporter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sent sentReports
		r := startBuildReporter(t.Context(), sent.send)
		r.enter("bootstrap")
		synctest.Wait()
		if got := sent.take(); len(got) != 1 || got[0].Stage != "bootstrap" || *got[0].Lines != 0 {
			t.Fatalf("entering a stage sent %+v", got)
		}
		r.line()
		r.line()
		time.Sleep(buildReportEvery - time.Millisecond)
		synctest.Wait()
		if got := sent.take(); len(got) != 0 {
			t.Fatalf("sent before buildReportEvery: %+v", got)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if got := sent.take(); len(got) != 1 || got[0].Stage != "bootstrap" || *got[0].Lines != 2 {
			t.Fatalf("the periodic report %+v, want bootstrap with 2 lines", got)
		}
		r.enter("filesystem")
		synctest.Wait()
		if got := sent.take(); len(got) != 1 || got[0].Stage != "filesystem" || *got[0].Lines != 0 {
			t.Fatalf("a new stage %+v", got)
		}
		r.end(context.Background(), errors.New("make: exit status 2\nthe last lines"))
		if got := sent.take(); len(got) != 1 || got[0].Status != "failed" || got[0].Error != "make: exit status 2 the last lines" {
			t.Fatalf("end with an error sent %+v", got)
		}

		r = startBuildReporter(t.Context(), sent.send)
		r.end(context.Background(), nil)
		if got := sent.take(); len(got) != 1 || got[0].Status != "done" || got[0].Error != "" {
			t.Fatalf("end sent %+v", got)
		}

		sent.fail = &client.StatusError{Code: 404, Message: "image build not found"}
		r = startBuildReporter(t.Context(), sent.send)
		r.enter("bootstrap")
		synctest.Wait()
		time.Sleep(3 * buildReportEvery)
		synctest.Wait()
		r.end(context.Background(), nil)
		if got := sent.take(); len(got) != 1 {
			t.Fatalf("after a 404: %d reports, want the one answered 404", len(got))
		}

		var none *buildReporter
		none.enter("x")
		none.line()
		none.end(context.Background(), nil)
	})
}

// TestReportText: a build's error as the daemon takes it: printable, on
// one line, valid UTF-8 within the limit.
func TestReportText(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"plain", "plain"},
		{"a\nb\tc", "a b c"},
		{"bad \xff byte", "bad ? byte"},
		{strings.Repeat("é", 10), strings.Repeat("é", 3) + "..."},
	} {
		if got := reportText(tt.in, 10); got != tt.want {
			t.Errorf("reportText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
