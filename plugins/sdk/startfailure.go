package sdk

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
)

// goPluginUnrecognized begins go-plugin's start-up error for a first line
// on stdout that is not the handshake (Client.Start, go-plugin v1.8); the
// line follows it, empty when stdout ended without one. go-plugin gives no
// other way to tell; TestLaunchBrokenBinaries fails if the text changes.
const goPluginUnrecognized = "Unrecognized remote plugin message:"

// printedMax bounds how much of a plugin's stray stdout line a start
// failure quotes.
const printedMax = 200

// startFailure says why the plugin at path failed its go-plugin start (err,
// from Client.Start) in words for the person reading a backend list: what
// the process did (could not be run, wrote something else than the
// handshake, exited with a status, was killed by a signal), the last lines
// of its stderr and what to check. cmd must have been waited for.
func startFailure(path string, cmd *exec.Cmd, err error, stderr string) string {
	line := strings.TrimSpace(strings.SplitN(err.Error(), "\n", 2)[0])
	printed, unrecognized := strings.CutPrefix(line, goPluginUnrecognized)
	printed = strings.TrimSpace(printed)
	status, ended := exitStatus(cmd.ProcessState)
	var errno syscall.Errno
	hint := true
	var what string
	switch {
	case cmd.Process == nil && errors.As(err, &errno):
		what = "it cannot be run: " + errno.Error()
	case cmd.Process == nil:
		what = "it cannot be run: " + firstLines(err.Error())
	case unrecognized && printed != "":
		if len(printed) > printedMax {
			printed = printed[:printedMax] + "..."
		}
		what = fmt.Sprintf("it wrote %q to stdout instead of the plugin handshake", printed)
	case ended:
		what = "it " + status + " before the plugin handshake"
	case unrecognized:
		what = "it closed its stdout without the plugin handshake"
	default: // a timeout, or something go-plugin says better
		what = firstLines(err.Error())
		hint = false
	}
	if stderr != "" {
		what += " (plugin stderr: " + stderr + ")"
	}
	if hint {
		what += ": " + buildHint(path)
	}
	return what
}

// exitStatus describes how a process that ended on its own ended: "exited
// with status 1", "was killed by signal 15 (terminated)". It reports false
// while the process has not been waited for, and for SIGKILL, which is how
// go-plugin ends a plugin whose start failed (an out-of-memory kill looks
// the same and is not told apart).
func exitStatus(ps *os.ProcessState) (string, bool) {
	if ps == nil {
		return "", false
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
		return ps.String(), true
	case ws.Exited():
		return fmt.Sprintf("exited with status %d", ws.ExitStatus()), true
	case ws.Signaled() && ws.Signal() != syscall.SIGKILL:
		return fmt.Sprintf("was killed by signal %d (%s)", int(ws.Signal()), ws.Signal()), true
	}
	return "", false
}

// elfMachines is the ELF machine of the binaries each GOARCH runs.
var elfMachines = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"386":     elf.EM_386,
	"arm64":   elf.EM_AARCH64,
	"arm":     elf.EM_ARM,
	"riscv64": elf.EM_RISCV,
	"ppc64le": elf.EM_PPC64,
	"ppc64":   elf.EM_PPC64,
	"s390x":   elf.EM_S390,
	"loong64": elf.EM_LOONGARCH,
}

// buildHint is what to check about a plugin binary that did not start:
// whether it is a guestlink plugin built for this machine, and the
// architecture it was built for when it is an ELF binary for another one.
func buildHint(path string) string {
	hint := fmt.Sprintf("is it a guestlink plugin built for this machine (%s/%s)?", runtime.GOOS, runtime.GOARCH)
	f, err := elf.Open(path)
	if err != nil {
		return hint
	}
	defer f.Close()
	if want, ok := elfMachines[runtime.GOARCH]; ok && f.Machine != want {
		hint += fmt.Sprintf(" It is an ELF binary for %s, this machine needs %s.", f.Machine, want)
	}
	return hint
}
