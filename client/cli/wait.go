package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/errdefs"
)

// Exit codes of guestlink wait and of launch/start --wait (documented in
// `guestlink wait --help` and docs/readiness.md).
const (
	ExitMet      = 0 // every instance met the condition
	ExitError    = 1 // any other failure (bad flags, daemon unreachable, ...)
	ExitTimeout  = 2 // the timeout passed first
	ExitStopped  = 3 // the instance is or went stopped, or failed (Error), so it cannot meet the condition
	ExitNotFound = 4 // no such instance (or it was deleted while waiting)
)

// waitExitHelp is the exit code table of the wait commands' help.
const waitExitHelp = `Exit codes:
  0  the condition holds (for every NAME)
  1  another error (bad flags, daemon unreachable...)
  2  timed out (the instance's conditions are printed)
  3  the instance is or went stopped, or failed (Error), while waiting
  4  no such instance, or it was deleted while waiting
With several NAMEs, the code is the first failing NAME's (in argument order).`

// exitError is an error with its own exit code (Execute returns it).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitCode returns the exit code of a command's error.
func exitCode(err error) int {
	if ee, ok := errors.AsType[*exitError](err); ok {
		return ee.code
	}
	return ExitError
}

// waitFors are the accepted values of --for / --wait.
var waitFors = []string{api.WaitReady, api.WaitAgentConnected, api.WaitRunning, api.WaitStopped}

func checkWaitFor(flag, v string) error {
	for _, f := range waitFors {
		if v == f {
			return nil
		}
	}
	return fmt.Errorf("invalid %s %q: must be one of %s", flag, v, strings.Join(waitFors, ", "))
}

func (s *session) waitCommand() *cobra.Command {
	var what string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait NAME... [--for ready|agent-connected|running|stopped] [--timeout 2m]",
		Short: "Wait until instances meet a condition (ready by default)",
		Long: "Wait, on the daemon (no polling), until every NAME meets the condition, one of them cannot\n" +
			"(stopped or failed), or the timeout passes. On a terminal it shows what it waits for and\n" +
			"for how long; it is quiet when its output is piped.\n\n" + waitExitHelp,
		Args: argsAtLeast(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkWaitFor("--for", what); err != nil {
				return err
			}
			return s.waitFor(cmd, args, what, timeout)
		},
	}
	cmd.Flags().StringVar(&what, "for", api.WaitReady, "condition: ready, agent-connected, running or stopped")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait at most (e.g. 30s, 2m)")
	return cmd
}

// addWaitFlags adds --wait and --timeout to launch and start.
func addWaitFlags(cmd *cobra.Command, what *string, timeout *time.Duration, timeoutFlag bool) {
	cmd.Flags().StringVar(what, "wait", "", "then wait for ready, agent-connected, running or stopped (exit codes as guestlink wait)")
	if timeoutFlag {
		cmd.Flags().DurationVar(timeout, "timeout", 2*time.Minute, "with --wait: how long to wait at most")
	}
}

// waitFor waits for every name and reports: a line per instance (and the
// conditions of those that did not meet it), or the answers with
// --format json|yaml. The error carries the exit code.
func (s *session) waitFor(cmd *cobra.Command, names []string, what string, timeout time.Duration) error {
	if timeout <= 0 {
		return fmt.Errorf("invalid --timeout %s: must be positive", timeout)
	}
	ctx := cmd.Context()
	stop := s.progress(cmd.ErrOrStderr(), names, what)
	results := make([]*api.InstanceWait, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			// The daemon answers at the timeout; the request may take a
			// little longer to come back.
			rctx, cancel := context.WithTimeout(ctx, timeout+30*time.Second)
			defer cancel()
			results[i], errs[i] = s.client.Wait(rctx, name, what, timeout)
		})
	}
	wg.Wait()
	stop()
	var answers []*api.InstanceWait
	for _, r := range results {
		if r != nil {
			answers = append(answers, r)
		}
	}
	if s.format != FormatTable {
		if err := s.render(answers, nil); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
		for _, r := range answers {
			writeWait(tw, r)
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("writing output: %w", err)
		}
	}
	for i, name := range names {
		if errs[i] != nil {
			code := ExitError
			if errors.Is(errs[i], errdefs.ErrNotFound) {
				code = ExitNotFound
			}
			return &exitError{code: code, err: errs[i]}
		}
		switch results[i].Outcome {
		case api.WaitMet:
			continue
		case api.WaitTimeout:
			return &exitError{code: ExitTimeout, err: fmt.Errorf("instance %s is not %s after %s", name, what, timeout)}
		case api.WaitDeleted:
			return &exitError{code: ExitNotFound, err: fmt.Errorf("instance %s was deleted while waiting for %s", name, what)}
		default:
			return &exitError{code: ExitStopped, err: fmt.Errorf("instance %s is %s (%s), so it cannot become %s", name, results[i].Outcome, results[i].Status, what)}
		}
	}
	return nil
}

// writeWait prints one answer for people: a line, and the conditions when
// the condition was not met.
func writeWait(w io.Writer, r *api.InstanceWait) {
	waited := (time.Duration(r.WaitedMS) * time.Millisecond).Round(100 * time.Millisecond)
	fmt.Fprintf(w, "%s: %s %s (%s) after %s\n", r.Instance, r.For, r.Outcome, r.Status, waited)
	if r.Outcome == api.WaitMet || len(r.Conditions) == 0 {
		return
	}
	writeConditions(w, "  ", r.Conditions)
}

// writeConditions prints conditions as a table, each line prefixed.
func writeConditions(w io.Writer, prefix string, conds []api.Condition) {
	row(w, prefix+"CONDITION", "STATUS", "REASON", "SINCE", "MESSAGE")
	for _, c := range conds {
		row(w, prefix+c.Type, c.Status, c.Reason, timeCell(&c.LastTransitionTime), c.Message)
	}
}

// progress shows, on a terminal only, what the command waits for and for
// how long, once a second; the returned function ends it.
func (s *session) progress(w io.Writer, names []string, what string) func() {
	f, ok := w.(*os.File)
	if !ok || !(isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())) {
		return func() {}
	}
	start := time.Now()
	done := make(chan struct{})
	finished := make(chan struct{})
	label := strings.Join(names, ", ")
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			fmt.Fprintf(f, "\rWaiting for %s to be %s... %s ", label, what, time.Since(start).Round(time.Second))
			select {
			case <-done:
				fmt.Fprint(f, "\r\033[K")
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
