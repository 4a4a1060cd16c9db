package pki

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/guestlink/guestlink/errdefs"
)

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestOpenCreatesThenLoadsDaemonCert(t *testing.T) {
	dir := t.TempDir()
	s1, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	d := s1.Daemon()
	if _, ok := d.Cert().PublicKey.(ed25519.PublicKey); !ok {
		t.Fatalf("daemon key is %T, want Ed25519", d.Cert().PublicKey)
	}
	if got := d.Cert().NotAfter.Sub(d.Cert().NotBefore); got < 9*365*24*time.Hour {
		t.Errorf("daemon cert validity %v, want about 10 years", got)
	}
	if m := mode(t, filepath.Join(dir, DaemonDir)); m != 0o700 {
		t.Errorf("pki dir mode %o, want 700", m)
	}
	if m := mode(t, filepath.Join(dir, DaemonDir, DaemonKeyFile)); m != 0o600 {
		t.Errorf("daemon key mode %o, want 600", m)
	}
	s2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s2.Daemon().CertPEM, d.CertPEM) {
		t.Fatal("reopening the store regenerated the daemon certificate")
	}
}

func TestInstanceGeneratedOnceAndNamed(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoadInstance("web1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("LoadInstance before generation: %v, want ErrNotFound", err)
	}
	c, err := s.Instance("web1")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Pair{c.Agent, c.Client} {
		if p.Cert().Subject.CommonName != "web1" || len(p.Cert().DNSNames) != 1 || p.Cert().DNSNames[0] != "web1" {
			t.Errorf("cert names %q %v, want web1", p.Cert().Subject.CommonName, p.Cert().DNSNames)
		}
	}
	if bytes.Equal(c.Agent.CertPEM, c.Client.CertPEM) {
		t.Fatal("agent and client certificates are the same")
	}
	idir := filepath.Join(dir, InstancesDir, "web1")
	if m := mode(t, idir); m != 0o700 {
		t.Errorf("instance dir mode %o, want 700", m)
	}
	for _, f := range []string{AgentKeyFile, ClientKeyFile} {
		if m := mode(t, filepath.Join(idir, f)); m != 0o600 {
			t.Errorf("%s mode %o, want 600", f, m)
		}
	}
	// A fresh store (daemon restart) loads the same pairs.
	s2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := s2.LoadInstance("web1")
	if err != nil {
		t.Fatal(err)
	}
	if !c2.Agent.Equal(c.Agent.Cert()) || !c2.Client.Equal(c.Client.Cert()) {
		t.Fatal("reloaded pairs differ from the generated ones")
	}
	other, err := s2.Instance("web2")
	if err != nil {
		t.Fatal(err)
	}
	if other.Agent.Equal(c.Agent.Cert()) {
		t.Fatal("two instances share an agent certificate")
	}
}

func TestNeverRegeneratesSilently(t *testing.T) {
	tests := []struct {
		name    string
		breakIt func(t *testing.T, idir string)
	}{
		{"key missing", func(t *testing.T, idir string) {
			if err := os.Remove(filepath.Join(idir, AgentKeyFile)); err != nil {
				t.Fatal(err)
			}
		}},
		{"cert missing", func(t *testing.T, idir string) {
			if err := os.Remove(filepath.Join(idir, ClientCertFile)); err != nil {
				t.Fatal(err)
			}
		}},
		{"garbage cert", func(t *testing.T, idir string) {
			if err := os.WriteFile(filepath.Join(idir, AgentCertFile), []byte("not pem"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"key of another pair", func(t *testing.T, idir string) {
			k, err := os.ReadFile(filepath.Join(idir, ClientKeyFile))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(idir, AgentKeyFile), k, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Instance("vm"); err != nil {
				t.Fatal(err)
			}
			idir := filepath.Join(dir, InstancesDir, "vm")
			tt.breakIt(t, idir)
			before := snapshot(t, idir)
			s2, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s2.Instance("vm"); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Instance on broken files: %v, want ErrCorrupt", err)
			}
			if after := snapshot(t, idir); !equalMaps(before, after) {
				t.Fatal("broken files were changed")
			}
		})
	}
}

func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = string(b)
	}
	return m
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestDeleteInstance(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Instance("vm")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteInstance("vm"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, InstancesDir, "vm")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("instance dir still there: %v", err)
	}
	if _, err := s.LoadInstance("vm"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("LoadInstance after delete: %v, want ErrNotFound", err)
	}
	if err := s.DeleteInstance("vm"); err != nil {
		t.Fatalf("deleting twice: %v", err)
	}
	c2, err := s.Instance("vm")
	if err != nil {
		t.Fatal(err)
	}
	if c2.Agent.Equal(c.Agent.Cert()) {
		t.Fatal("a re-created instance got the deleted instance's certificate")
	}
}

func TestInvalidNames(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", ".", "..", "a/b", "../x", `a\b`, "a\x00b"} {
		t.Run(name, func(t *testing.T) {
			if _, err := s.Instance(name); !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("Instance(%q): %v, want ErrInvalid", name, err)
			}
			if err := s.DeleteInstance(name); !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("DeleteInstance(%q): %v, want ErrInvalid", name, err)
			}
		})
	}
}

func TestGeneratePairAndValidAt(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p, err := GeneratePair("x", now, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		at   time.Time
		want bool
	}{
		{"before", now.Add(-time.Second), false},
		{"start", now, true},
		{"inside", now.Add(30 * time.Minute), true},
		{"end", now.Add(time.Hour), true},
		{"after", now.Add(time.Hour + time.Second), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ValidAt(p.Cert(), tt.at); got != tt.want {
				t.Fatalf("ValidAt = %v, want %v", got, tt.want)
			}
		})
	}
}
