package flagfile

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// flags is a command's flag set as guestlinkd declares its own.
type flags struct {
	fs        *flag.FlagSet
	stateDir  string
	http      string
	hosts     []string
	allow     bool
	rate      float64
	limit     int
	heartbeat time.Duration
	config    string
}

func newFlags(env string) *flags {
	f := &flags{fs: flag.NewFlagSet("test", flag.ContinueOnError)}
	f.fs.StringVar(&f.stateDir, "state-dir", env, "")
	f.fs.StringVar(&f.http, "http", "", "")
	f.fs.Func("http-host", "", func(v string) error { f.hosts = append(f.hosts, v); return nil })
	f.fs.BoolVar(&f.allow, "allow-disk-paths", false, "")
	f.fs.Float64Var(&f.rate, "guest-ring-bytes", 4096, "")
	f.fs.IntVar(&f.limit, "api-max-requests", 0, "")
	f.fs.DurationVar(&f.heartbeat, "cluster-heartbeat", 0, "")
	f.fs.StringVar(&f.config, "config", "", "")
	return f
}

var opts = Options{
	Env:        map[string]string{"state-dir": "FLAGFILE_TEST_STATE_DIR"},
	Repeatable: map[string]bool{"http-host": true},
	Skip:       map[string]bool{"config": true},
	// In these tests a value is a secret when it says so.
	Secret: func(key, v string) bool { return strings.Contains(v, "SECRET") },
}

func writeFile(t *testing.T, body string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "guestlinkd.yaml")
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return p
}

func TestApply(t *testing.T) {
	full := `state-dir: /var/lib/guestlink
http: 127.0.0.1:8080
http-host: [a.example, b.example]
allow-disk-paths: true
guest-ring-bytes: 1e6
api-max-requests: 64
cluster-heartbeat: 500ms
`
	for _, tt := range []struct {
		name string
		file string
		args []string
		env  string
		want func(f *flags) bool
	}{
		{"every kind of value", full, nil, "", func(f *flags) bool {
			return f.stateDir == "/var/lib/guestlink" && f.http == "127.0.0.1:8080" && strings.Join(f.hosts, ",") == "a.example,b.example" &&
				f.allow && f.rate == 1e6 && f.limit == 64 && f.heartbeat == 500*time.Millisecond
		}},
		{"the command line wins", full, []string{"--http", "127.0.0.1:9090", "--http-host", "c.example"}, "", func(f *flags) bool {
			return f.http == "127.0.0.1:9090" && strings.Join(f.hosts, ",") == "c.example" && f.limit == 64
		}},
		{"the environment wins", full, nil, "/srv/guestlink", func(f *flags) bool {
			return f.stateDir == "/srv/guestlink" && f.http == "127.0.0.1:8080"
		}},
		{"an empty file changes nothing", "# nothing set\n", nil, "", func(f *flags) bool {
			return f.stateDir == "" && f.rate == 4096 && f.hosts == nil
		}},
		{"a one-item list", "http-host: [a.example]\n", nil, "", func(f *flags) bool { return strings.Join(f.hosts, ",") == "a.example" }},
		{"a quoted number", "api-max-requests: \"8\"\n", nil, "", func(f *flags) bool { return f.limit == 8 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("FLAGFILE_TEST_STATE_DIR", tt.env)
			f := newFlags(tt.env)
			if err := f.fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if err := Apply(f.fs, writeFile(t, tt.file, 0o600), opts); err != nil {
				t.Fatal(err)
			}
			if !tt.want(f) {
				t.Fatalf("flags after the file: %+v", *f)
			}
		})
	}
}

func TestApplyRefuses(t *testing.T) {
	for _, tt := range []struct {
		name string
		file string
		mode os.FileMode
		msg  string
	}{
		{"unknown key", "htp: 127.0.0.1:8080\n", 0o600, `unknown key "htp" (the keys are the flags' names: allow-disk-paths, api-max-requests`},
		{"the config key", "config: /etc/other.yaml\n", 0o600, `unknown key "config"`},
		{"list for a single flag", "http: [a, b]\n", 0o600, "http: takes one value, not a list"},
		{"mapping value", "http: {addr: x}\n", 0o600, "http: want a string, number or boolean"},
		{"no value", "http:\n", 0o600, "http: no value"},
		{"bad value", "api-max-requests: many\n", 0o600, `api-max-requests: parse error`},
		{"bad duration", "cluster-heartbeat: 5\n", 0o600, `cluster-heartbeat: parse error`},
		{"not a mapping", "- http\n", 0o600, "cannot unmarshal"},
		{"duplicate key", "http: a\nhttp: b\n", 0o600, `"http" already defined`},
		{"group-writable", "http: a\n", 0o620, "writable by group or others (mode 0620): chmod go-w"},
		{"world-writable", "http: a\n", 0o606, "writable by group or others"},
		{"a secret readable by others", "http-host: [a.example, SECRET.example]\n", 0o604, "http-host holds a secret and the file is readable by others (mode 0604): chmod o-r"},
		{"a secret in a 0644 file", "http: SECRET\n", 0o644, "http holds a secret"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFlags("")
			if err := f.fs.Parse(nil); err != nil {
				t.Fatal(err)
			}
			err := Apply(f.fs, writeFile(t, tt.file, tt.mode), opts)
			if err == nil || !strings.Contains(err.Error(), tt.msg) || !strings.Contains(err.Error(), "config file ") {
				t.Fatalf("err = %v, want one containing %q", err, tt.msg)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		f := newFlags("")
		if err := Apply(f.fs, filepath.Join(t.TempDir(), "none.yaml"), opts); err == nil || !strings.Contains(err.Error(), "no such file") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a directory", func(t *testing.T) {
		f := newFlags("")
		if err := Apply(f.fs, t.TempDir(), opts); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a fifo", func(t *testing.T) { // refused, not waited on for a writer
		f := newFlags("")
		p := filepath.Join(t.TempDir(), "fifo.yaml")
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := Apply(f.fs, p, opts); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a secret readable by the group, a plain value by others", func(t *testing.T) {
		for _, tc := range []struct {
			body string
			mode os.FileMode
		}{{"http: SECRET\n", 0o640}, {"http: 127.0.0.1:8080\n", 0o644}} {
			f := newFlags("")
			if err := f.fs.Parse(nil); err != nil {
				t.Fatal(err)
			}
			if err := Apply(f.fs, writeFile(t, tc.body, tc.mode), opts); err != nil {
				t.Errorf("%q mode %04o: %v; want it accepted", tc.body, tc.mode, err)
			}
		}
	})
	t.Run("too large", func(t *testing.T) {
		f := newFlags("")
		p := writeFile(t, "# "+strings.Repeat("x", MaxSize)+"\n", 0o600)
		if err := Apply(f.fs, p, opts); err == nil || !strings.Contains(err.Error(), "larger than") {
			t.Fatalf("err = %v", err)
		}
	})
}
