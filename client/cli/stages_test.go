package cli

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestStages: piped, a build's output passes through unchanged without
// its stage markers or any progress drawing; on a terminal, each stage
// ends with its name and time, the output goes to a log that is removed
// on success and whose tail (and path) is shown on failure.
func TestStages(t *testing.T) {
	input := "guestlink-stage: bootstrap\nI: one\nI: two\nguestlink-stage: filesystem\nmkfs done\n"
	for _, tt := range []struct {
		name   string
		tty    bool
		failed bool
		want   []string // regexps the output must match
		absent []string // substrings it must not hold
	}{
		{"piped", false, false, []string{`\AI: one\nI: two\nmkfs done\n\z`}, []string{"guestlink-stage", "[1]"}},
		{"piped failure", false, true, []string{`\AI: one\nI: two\nmkfs done\n\z`}, []string{"the whole output"}},
		{"terminal", true, false, []string{`\[1\] bootstrap: \d+s\n`, `\[2\] filesystem: \d+s\n`}, []string{"I: one", "mkfs done"}},
		{"terminal failure", true, true, []string{`\[1\] bootstrap: \d+s\n`, `\[2\] filesystem: failed after \d+s\nI: one\nI: two\nmkfs done\n\(the whole output: (\S+)\)`}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			st, err := newStages(&out, tt.tty)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.run(strings.NewReader(input)); err != nil {
				t.Fatal(err)
			}
			st.close(tt.failed)
			got := out.String()
			for _, re := range tt.want {
				if !regexp.MustCompile(re).MatchString(got) {
					t.Errorf("output does not match %q:\n%s", re, got)
				}
			}
			for _, s := range tt.absent {
				if strings.Contains(got, s) {
					t.Errorf("output holds %q:\n%s", s, got)
				}
			}
			if st.log == nil {
				return
			}
			_, statErr := os.Stat(st.log.Name())
			if tt.failed {
				if statErr != nil {
					t.Errorf("the failed build's log is gone: %v", statErr)
				}
				os.Remove(st.log.Name())
			} else if !os.IsNotExist(statErr) {
				t.Errorf("a successful build left its log %s", st.log.Name())
			}
		})
	}
}
