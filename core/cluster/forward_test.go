package cluster

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestForwardedDeadline reads the deadline headers as the owner does: the
// earlier of "remaining from arrival" and the absolute deadline (a request
// that sat unread at a frozen member is past the latter), none without
// headers, an error for malformed ones.
func TestForwardedDeadline(t *testing.T) {
	arrived := time.UnixMilli(1_800_000_000_000)
	for _, tc := range []struct {
		name    string
		headers map[string]string
		want    time.Time // zero: none
		wantErr bool
	}{
		{"no headers", nil, time.Time{}, false},
		{"remaining only", map[string]string{HeaderTimeout: "1500"}, arrived.Add(1500 * time.Millisecond), false},
		{"absolute only", map[string]string{HeaderDeadline: "1800000002000"}, time.UnixMilli(1_800_000_002_000), false},
		{"sat unread 50 s: the absolute deadline is earlier", map[string]string{HeaderTimeout: "2000", HeaderDeadline: "1799999952000"},
			time.UnixMilli(1_799_999_952_000), false},
		{"sender's clock ahead: the remaining time is earlier", map[string]string{HeaderTimeout: "2000", HeaderDeadline: "1800000009000"},
			arrived.Add(2 * time.Second), false},
		{"malformed remaining", map[string]string{HeaderTimeout: "soon"}, time.Time{}, true},
		{"negative remaining", map[string]string{HeaderTimeout: "-5"}, time.Time{}, true},
		{"malformed deadline", map[string]string{HeaderDeadline: "1e12"}, time.Time{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := ForwardedDeadline(func(k string) string { return tc.headers[k] }, arrived)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if ok != !tc.want.IsZero() || !got.Equal(tc.want) {
				t.Errorf("deadline = %v (%v), want %v", got, ok, tc.want)
			}
		})
	}
	// SetDeadline writes what ForwardedDeadline reads back.
	h := http.Header{}
	dl := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
	SetDeadline(h, dl)
	got, ok, err := ForwardedDeadline(h.Get, time.Now())
	if err != nil || !ok || got.After(dl) || dl.Sub(got) > 100*time.Millisecond {
		t.Errorf("round trip: %v %v %v, want about %v", got, ok, err, dl)
	}
}

// TestNotAnswered names the budget when it ran out, the cause otherwise.
func TestNotAnswered(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{context.DeadlineExceeded, "member b did not answer in 2 s"},
		{os.ErrDeadlineExceeded, "member b did not answer in 2 s"},
		{errors.New("connection refused"), "member b did not answer: connection refused"},
	} {
		err := NotAnswered("b", 2*time.Second, tc.err)
		if !errors.Is(err, ErrOffline) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("NotAnswered(%v) = %v, want %q wrapping ErrOffline", tc.err, err, tc.want)
		}
	}
}
