package packaging_test

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/internal/testenv"
)

// debFile returns the one package bin/packages holds for name.
func debFile(t *testing.T, name string) string {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join("..", "bin", "packages", name+"_*_amd64.deb"))
	if len(matches) == 0 {
		testenv.Requires(t, "bin/packages/"+name+"_*.deb", "run make packages")
	}
	return matches[len(matches)-1]
}

// TestAgentPackage unpacks the agent package into a clean tree (dpkg -x)
// and checks its files: the static agent, the Type=notify unit ordered
// before cloud-init-local, the udev rule for both port names, the setup
// script, and the package's control fields.
func TestAgentPackage(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		testenv.Requires(t, "dpkg-deb", "a Debian system")
	}
	deb := debFile(t, "guestlink-agent")
	root := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "-x", deb, root).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x: %v: %s", err, out)
	}
	for _, f := range []struct {
		path string
		mode os.FileMode
		has  []string
	}{
		{"usr/bin/guestlink-agent", 0o755, nil},
		{"usr/lib/guestlink-agent/setup", 0o755, []string{"GLCONFIG", "mount -o ro", "guestlink.link="}},
		{"usr/lib/systemd/system/guestlink-agent.service", 0o644, []string{"Type=notify", "Before=cloud-init-local.service", "ConditionVirtualization=vm", "ExecStartPre=/usr/lib/guestlink-agent/setup"}},
		{"usr/lib/udev/rules.d/99-guestlink-agent.rules", 0o644, []string{
			`ATTR{name}=="com.canonical.lxd", TAG+="systemd", ENV{SYSTEMD_WANTS}+="guestlink-agent.service"`,
			`ATTR{name}=="org.linuxcontainers.lxd", TAG+="systemd", ENV{SYSTEMD_WANTS}+="guestlink-agent.service"`}},
	} {
		p := filepath.Join(root, f.path)
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("%s: %v", f.path, err)
			continue
		}
		if fi.Mode().Perm() != f.mode {
			t.Errorf("%s: mode %v, want %v", f.path, fi.Mode().Perm(), f.mode)
		}
		data, _ := os.ReadFile(p)
		for _, s := range f.has {
			if !strings.Contains(string(data), s) {
				t.Errorf("%s lacks %q", f.path, s)
			}
		}
	}
	bin, err := elf.Open(filepath.Join(root, "usr/bin/guestlink-agent"))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	for _, p := range bin.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the agent is dynamically linked: a guest may lack its libraries")
		}
	}
	out, err := exec.Command("dpkg-deb", "-f", deb, "Package", "Architecture").Output()
	if err != nil || string(out) != "Package: guestlink-agent\nArchitecture: amd64\n" {
		t.Errorf("control fields %q, %v", out, err)
	}
}

// TestHostPackage unpacks the host package into a clean tree and checks
// its files: daemon, CLI, plugins with a SHA256SUMS that matches them, the
// Type=notify unit that keeps guests running, the options file as a
// conffile, the group made at install, completions and man pages.
func TestHostPackage(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		testenv.Requires(t, "dpkg-deb", "a Debian system")
	}
	deb := debFile(t, "guestlink")
	root := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "-x", deb, root).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x: %v: %s", err, out)
	}
	for _, f := range []struct {
		path string
		mode os.FileMode
		has  []string
	}{
		{"usr/bin/guestlinkd", 0o755, nil},
		{"usr/bin/guestlink", 0o755, nil},
		{"usr/lib/guestlink/plugins/sim", 0o755, nil},
		{"usr/lib/guestlink/plugins/qemu", 0o755, nil},
		{"usr/lib/guestlink/plugins/qemu-legacy", 0o755, nil},
		{"usr/lib/guestlink/plugins/fleet", 0o755, nil},
		// sdk.AgentPath's default for /usr/lib/guestlink/plugins/sim: the
		// sim's guests have an agent on a packaged host too.
		{"usr/lib/guestlink/guestlink-agent", 0o755, nil},
		{"usr/lib/guestlink/plugins/SHA256SUMS", 0o644, []string{"  fleet\n", "  qemu\n", "  qemu-legacy\n", "  sim\n"}},
		{"usr/lib/systemd/system/guestlinkd.service", 0o644, []string{"Type=notify", "Group=guestlink", "KillMode=process",
			"--state-dir /var/lib/guestlink --plugin-dir /usr/lib/guestlink/plugins --config /etc/guestlink/guestlinkd.yaml $GUESTLINKD_OPTS", "EnvironmentFile=-/etc/default/guestlinkd"}},
		{"etc/default/guestlinkd", 0o644, []string{"GUESTLINKD_OPTS="}},
		{"etc/guestlink/guestlinkd.yaml", 0o640, []string{"default-backend: qemu"}},
		{"usr/share/bash-completion/completions/guestlink", 0o644, []string{"__start_guestlink"}},
		{"usr/share/zsh/vendor-completions/_guestlink", 0o644, []string{"#compdef guestlink"}},
		{"usr/share/fish/vendor_completions.d/guestlink.fish", 0o644, []string{"complete -c guestlink"}},
		{"usr/share/man/man1/guestlink.1", 0o644, []string{".TH \"GUESTLINK\" \"1\""}},
		{"usr/share/man/man1/guestlink-image-import.1", 0o644, []string{"image import"}},
	} {
		p := filepath.Join(root, f.path)
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("%s: %v", f.path, err)
			continue
		}
		if fi.Mode().Perm() != f.mode {
			t.Errorf("%s: mode %v, want %v", f.path, fi.Mode().Perm(), f.mode)
		}
		data, _ := os.ReadFile(p)
		for _, s := range f.has {
			if !strings.Contains(string(data), s) {
				t.Errorf("%s lacks %q", f.path, s)
			}
		}
	}
	// Every key the shipped configuration sets, or shows commented out, is a
	// flag of the shipped daemon.
	help, _ := exec.Command(filepath.Join(root, "usr/bin/guestlinkd"), "-h").CombinedOutput()
	conf, _ := os.ReadFile(filepath.Join(root, "etc/guestlink/guestlinkd.yaml"))
	for _, m := range regexp.MustCompile(`(?m)^(?:#   )?([a-z][a-z-]+):`).FindAllStringSubmatch(string(conf), -1) {
		if !strings.Contains(string(help), "\n  -"+m[1]+" ") && !strings.Contains(string(help), "\n  -"+m[1]+"\n") {
			t.Errorf("etc/guestlink/guestlinkd.yaml sets %q, which guestlinkd -h does not list", m[1])
		}
	}
	// SHA256SUMS matches the plugins it names (the daemon refuses others).
	cmd := exec.Command("sha256sum", "--check", "--quiet", "SHA256SUMS")
	cmd.Dir = filepath.Join(root, "usr/lib/guestlink/plugins")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("SHA256SUMS does not match the plugins: %v: %s", err, out)
	}
	ctl := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "-e", deb, ctl).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -e: %v: %s", err, out)
	}
	for _, c := range []struct{ file, want string }{
		{"conffiles", "/etc/default/guestlinkd\n"}, {"conffiles", "/etc/guestlink/guestlinkd.yaml\n"}, {"postinst", "groupadd --system guestlink"},
	} {
		file, want := c.file, c.want
		data, err := os.ReadFile(filepath.Join(ctl, file))
		if err != nil || !strings.Contains(string(data), want) {
			t.Errorf("control %s lacks %q: %v", file, want, err)
		}
	}
}
