package probe

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeSystemctl writes a systemctl that says state and lists units as
// failed.
func fakeSystemctl(t *testing.T, state string, units ...string) string {
	t.Helper()
	dir := t.TempDir()
	var list strings.Builder
	for _, u := range units {
		list.WriteString(u + " loaded failed failed " + u + "\n")
	}
	script := "#!/bin/sh\ncase \"$1\" in\nis-system-running) echo " + state + "; [ " + state + " = running ] ;;\n" +
		"list-units) printf '%s' '" + list.String() + "' ;;\nesac\n"
	p := filepath.Join(dir, "systemctl")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheck(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer ok.Close()
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) }))
	defer bad.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()

	tests := []struct {
		name      string
		cfg       Config
		systemctl string
		want      Declaration
		wantOK    bool
	}{
		{"http ok", Config{HTTP: ok.URL}, "", Declaration{StateReady, ReasonProbeSucceeded, ok.URL + ": ok"}, true},
		{"http 503", Config{HTTP: bad.URL}, "", Declaration{StateStarted, ReasonProbeFailed, bad.URL + ": status 503"}, false},
		{"http refused", Config{HTTP: "http://" + closedAddr + "/"}, "", Declaration{StateStarted, ReasonProbeFailed, "http://" + closedAddr + "/: connection refused"}, false},
		{"tcp ok", Config{TCP: ln.Addr().String()}, "", Declaration{StateReady, ReasonProbeSucceeded, "tcp " + ln.Addr().String() + ": ok"}, true},
		{"tcp refused", Config{TCP: closedAddr}, "", Declaration{StateStarted, ReasonProbeFailed, "tcp " + closedAddr + ": connection refused"}, false},
		{"exec ok", Config{Exec: "true"}, "", Declaration{StateReady, ReasonProbeSucceeded, "exec true: ok"}, true},
		{"exec fails", Config{Exec: "echo not yet; exit 3"}, "", Declaration{StateStarted, ReasonProbeFailed, "exec echo not yet; exit 3: exit status 3: not yet"}, false},
		{"systemd running", Config{Systemd: true}, "running", Declaration{StateReady, ReasonSystemRunning, "systemd: running"}, true},
		{"systemd degraded", Config{Systemd: true}, "degraded", Declaration{StateDegraded, ReasonUnitsFailed, "nginx.service, foo.service"}, false},
		{"systemd starting", Config{Systemd: true}, "starting", Declaration{StateStarted, ReasonSystemStarting, "systemd: starting"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Timeout = 10 * time.Second
			k := &Checker{}
			if tt.systemctl != "" {
				k.Systemctl = fakeSystemctl(t, tt.systemctl, "nginx.service", "foo.service")
			}
			got, gotOK := k.Check(context.Background(), tt.cfg)
			if got != tt.want || gotOK != tt.wantOK {
				t.Fatalf("got %+v %v, want %+v %v", got, gotOK, tt.want, tt.wantOK)
			}
		})
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		kv   map[string]string
		want Config
		err  string
	}{
		{map[string]string{}, Config{Period: DefaultPeriod, Timeout: DefaultTimeout, Success: 1, Failure: 1}, ""},
		{map[string]string{KeyTCP: "h:1", KeyPeriod: "2s", KeySuccess: "3", KeyFailure: "2"}, Config{TCP: "h:1", Period: 2 * time.Second, Timeout: DefaultTimeout, Success: 3, Failure: 2}, ""},
		{map[string]string{KeySystemd: "maybe"}, Config{}, "is not a boolean"},
		{map[string]string{KeyPeriod: "-1s"}, Config{}, "is not a positive duration"},
		{map[string]string{KeyFailure: "0"}, Config{}, "is not a positive integer"},
	}
	for _, tt := range tests {
		got, err := Parse(tt.kv)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Parse(%v): %v, want %q", tt.kv, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Parse(%v) = %+v, %v", tt.kv, got, err)
		}
	}
}

// TestRunnerThresholds checks that the runner declares only after the
// thresholds and only on a change.
func TestRunnerThresholds(t *testing.T) {
	dir := t.TempDir()
	flag := filepath.Join(dir, "ok")
	var mu sync.Mutex
	var got []string
	decl := make(chan struct{}, 16)
	r := &Runner{Declare: func(_ context.Context, d Declaration) error {
		mu.Lock()
		got = append(got, d.State)
		mu.Unlock()
		decl <- struct{}{}
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx, Config{Exec: "test -e " + flag, Period: 20 * time.Millisecond, Timeout: 10 * time.Second, Success: 3, Failure: 2})
	}()
	wait := func(what string) {
		t.Helper()
		select {
		case <-decl:
		case <-time.After(time.Minute):
			t.Fatalf("no declaration: %s", what)
		}
	}
	wait("Started after 2 failures")
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wait("Ready after 3 successes")
	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	wait("Started again")
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, ",") != "Started,Ready,Started" {
		t.Fatalf("declarations %v", got)
	}
}
