package oomkill

import (
	"bytes"
	"strings"
	"testing"
)

// TestParse feeds the kernel's own OOM lines, as consoles of several
// kernel versions print them, and lines that look close but are no kill.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		line string
		want Kill
		ok   bool
	}{
		{"linux 6.1 (debian 12, the issue's boot)", "[  189.345678] Out of memory: Killed process 1234 (localedef) total-vm:71544kB, anon-rss:59756kB, file-rss:4kB, shmem-rss:0kB, UID:0 pgtables:180kB oom_score_adj:0", Kill{PID: 1234, Process: "localedef"}, true},
		{"linux 5.4", "[ 1234.567890] Out of memory: Killed process 2592 (stress) total-vm:8192500kB, anon-rss:3905872kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:7700kB oom_score_adj:0", Kill{PID: 2592, Process: "stress"}, true},
		{"linux 4.19 selection is no kill", "[  100.123456] Out of memory: Kill process 1234 (stress) score 951 or sacrifice child", Kill{}, false},
		{"linux 4.19 kill", "[  100.125000] Killed process 1234 (stress) total-vm:1059472kB, anon-rss:990064kB, file-rss:4kB, shmem-rss:0kB", Kill{PID: 1234, Process: "stress"}, true},
		{"linux 3.10 kill", "[ 5432.110001] Killed process 30301 (java) total-vm:4096244kB, anon-rss:2967140kB, file-rss:0kB", Kill{PID: 30301, Process: "java"}, true},
		{"memory cgroup, 5.x", "[  300.100000] Memory cgroup out of memory: Killed process 4321 (python3) total-vm:123456kB, anon-rss:65536kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:256kB oom_score_adj:0", Kill{PID: 4321, Process: "python3", Cgroup: true}, true},
		{"printk caller id", "[   42.000000][    T1] Out of memory: Killed process 77 (systemd-journal) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1kB oom_score_adj:-250", Kill{PID: 77, Process: "systemd-journal"}, true},
		{"no timestamp, syslog level, serial CR", "<3>Out of memory: Killed process 9 (cc1plus) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1kB oom_score_adj:0\r", Kill{PID: 9, Process: "cc1plus"}, true},
		{"comm with spaces and parentheses", "[    1.000000] Out of memory: Killed process 5 (my (odd) name) total-vm:1kB, anon-rss:1kB", Kill{PID: 5, Process: "my (odd) name"}, true},
		{"oom reaper is no new kill", "[  189.400000] oom_reaper: reaped process 1234 (localedef), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB", Kill{}, false},
		{"no killable process", "[  190.000000] Out of memory and no killable processes...", Kill{}, false},
		{"user text", "I Killed process 1 (init) with my bare hands", Kill{}, false},
		{"no pid", "[ 1.0] Out of memory: Killed process (x)", Kill{}, false},
		{"no name", "[ 1.0] Out of memory: Killed process 12", Kill{}, false},
		{"pid too long", "[ 1.0] Out of memory: Killed process 123456789012 (x)", Kill{}, false},
		{"empty", "", Kill{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Parse([]byte(tc.line))
			if ok != tc.ok || got != tc.want {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v, %v", tc.line, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestParseSanitizes: a guest's comm with control bytes or invalid UTF-8
// comes out printable and bounded.
func TestParseSanitizes(t *testing.T) {
	got, ok := Parse([]byte("Out of memory: Killed process 3 (a\x1b[31m\xffb) total-vm:1kB"))
	if !ok || got.Process != "a?[31m?b" {
		t.Fatalf("got %+v, %v; want the escape and the invalid byte as ?", got, ok)
	}
	got, ok = Parse([]byte("Out of memory: Killed process 3 (" + strings.Repeat("x", 500) + ") total-vm:1kB"))
	if !ok || len(got.Process) != MaxProcess {
		t.Fatalf("a 500-byte name came out as %d bytes; want %d", len(got.Process), MaxProcess)
	}
}

// TestLines writes a stream in pieces of every size and checks the lines:
// whole ones, CRs trimmed, an over-long line cut once and its rest dropped.
func TestLines(t *testing.T) {
	long := strings.Repeat("y", MaxLine+100)
	stream := "one\r\ntwo\n\n" + long + "\nthree\n" + strings.Repeat("z", MaxLine) + "\npartial"
	want := []string{"one", "two", "", long[:MaxLine], "three", strings.Repeat("z", MaxLine)}
	for _, size := range []int{1, 2, 7, 64, 1000, len(stream)} {
		var l Lines
		var got []string
		for s := stream; len(s) > 0; {
			n := min(size, len(s))
			l.Write([]byte(s[:n]), func(line []byte) { got = append(got, string(line)) })
			s = s[n:]
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("pieces of %d: got %d lines %.80q, want %d", size, len(got), got, len(want))
		}
		if len(l.buf) != len("partial") {
			t.Fatalf("pieces of %d: %d bytes kept of the unfinished line, want 7", size, len(l.buf))
		}
	}
}

// FuzzLines feeds arbitrary bytes, in two pieces, through Lines and Parse:
// nothing panics, no line passes MaxLine, the buffer stays bounded, and a
// parsed kill's name is printable and bounded.
func FuzzLines(f *testing.F) {
	f.Add([]byte("[  189.3] Out of memory: Killed process 1234 (localedef) total-vm:1kB\n"), 10)
	f.Add([]byte("Killed process 1 (\xff\x00)\r\n\x00\x00"), 3)
	f.Add(bytes.Repeat([]byte{0xfe}, 3000), 1500)
	f.Fuzz(func(t *testing.T, data []byte, cut int) {
		var l Lines
		cut = min(max(cut, 0), len(data))
		check := func(line []byte) {
			if len(line) > MaxLine {
				t.Fatalf("a line of %d bytes", len(line))
			}
			if k, ok := Parse(line); ok {
				if len(k.Process) > MaxProcess || k.PID < 0 || strings.ContainsAny(k.Process, "\x00\n\r\x1b") {
					t.Fatalf("kill %+v from %q", k, line)
				}
			}
		}
		l.Write(data[:cut], check)
		l.Write(data[cut:], check)
		if len(l.buf) > MaxLine {
			t.Fatalf("%d bytes buffered", len(l.buf))
		}
	})
}
