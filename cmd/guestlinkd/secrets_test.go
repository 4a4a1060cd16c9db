package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretResolve tries every way of giving --database and checks the
// precedence (command line, environment, config file), which ones warn
// and which are refused.
func TestSecretResolve(t *testing.T) {
	const env = "GUESTLINKD_TEST_DATABASE_URL"
	fileURL := "postgres://u:from-file@db/x"
	path := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(path, []byte(fileURL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		cmdline []string // flags given on the command line
		config  []string // flags the config file set
		value   string   // --database's value after parsing
		file    string   // --database-file's
		env     string
		want    string
		warn    bool
		err     string
	}{
		{name: "nothing", want: ""},
		{name: "--database with a password warns", cmdline: []string{"database"}, value: "postgres://u:pw@db/x", want: "postgres://u:pw@db/x", warn: true},
		{name: "--database without one does not", cmdline: []string{"database"}, value: "sqlite:///var/lib/g.db", want: "sqlite:///var/lib/g.db"},
		{name: "--database-file", cmdline: []string{"database-file"}, file: path, want: fileURL},
		{name: "both on the command line", cmdline: []string{"database", "database-file"}, value: "x", file: path, err: "--database and --database-file: give one"},
		{name: "the command line's file wins over the env", cmdline: []string{"database-file"}, file: path, env: "postgres://env/x", want: fileURL},
		{name: "the env", env: "postgres://u:pw@env/x", want: "postgres://u:pw@env/x"},
		{name: "the env wins over the config file", config: []string{"database-file"}, file: path, env: "postgres://env/x", want: "postgres://env/x"},
		{name: "the config file's file", config: []string{"database-file"}, file: path, want: fileURL},
		{name: "the config file's url, no warning", config: []string{"database"}, value: "postgres://u:pw@db/x", want: "postgres://u:pw@db/x"},
		{name: "the command line's file wins over the config file's url", cmdline: []string{"database-file"}, config: []string{"database"}, value: "postgres://cfg/x", file: path, want: fileURL},
		{name: "both in the config file", config: []string{"database", "database-file"}, value: "x", file: path, err: "the config file sets both database and database-file"},
		{name: "an unreadable file", cmdline: []string{"database-file"}, file: filepath.Join(t.TempDir(), "missing"), err: "--database-file: secret file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(env, tc.env)
			value, file := tc.value, tc.file
			s := secretSetting{name: "database", env: env, value: &value, file: &file, secret: databaseSecret}
			cmdline, set := map[string]bool{}, map[string]bool{}
			for _, f := range tc.cmdline {
				cmdline[f], set[f] = true, true
			}
			for _, f := range tc.config {
				set[f] = true
			}
			warning, err := s.resolve(cmdline, set)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("resolve: %v; want an error saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if value != tc.want {
				t.Errorf("--database = %q, want %q", value, tc.want)
			}
			if (warning != "") != tc.warn {
				t.Errorf("warning %q; want one: %v", warning, tc.warn)
			}
			if strings.Contains(warning, "pw") {
				t.Errorf("the warning shows the secret: %q", warning)
			}
		})
	}
}

func TestDatabaseSecret(t *testing.T) {
	for v, want := range map[string]bool{
		"":                                      false,
		"/var/lib/guestlink/guestlink.db":       false,
		"sqlite:///var/lib/guestlink/g.db":      false,
		"postgres://guestlink@db/guestlink":     false,
		"postgres://guestlink:pw@db/guestlink":  true,
		"postgres://guestlink:@db/guestlink":    true,
		"postgres://db/guestlink?password=pw":   true,
		"postgresql://db/g?sslmode=verify-full": false,
		"postgres://%zz":                        true, // unparsable: assume a secret
	} {
		if got := databaseSecret(v); got != want {
			t.Errorf("databaseSecret(%q) = %v, want %v", v, got, want)
		}
	}
}
