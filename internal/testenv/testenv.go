// Package testenv gates tests on what the machine provides (QEMU, the guest
// image, PostgreSQL, Chromium, cloud-init): outside CI a missing requirement
// skips the test and says why; in CI (CI=true), where scripts/install-deps.sh
// and make test install everything, it fails the test, so nothing skips
// silently there.
package testenv

import (
	"os"
	"strconv"
	"testing"
)

// EnvCI is the environment variable CI systems set; .ci/run sets it too.
const EnvCI = "CI"

// InCI reports whether the tests run in CI: CI is set to a true value
// ("true", "1", ...). A requirement missing there is a failure.
func InCI() bool {
	v, err := strconv.ParseBool(os.Getenv(EnvCI))
	return err == nil && v
}

// Requires ends t because what is missing on this machine: with t.Fatalf in
// CI, with t.Skipf elsewhere. why says how to get it ("scripts/install-deps.sh
// installs qemu-system-x86") or what was found missing. Call it only once the
// requirement is known to be missing.
func Requires(t testing.TB, what, why string) {
	t.Helper()
	if InCI() {
		t.Fatalf("requires %s (CI=true: a missing requirement fails): %s", what, why)
	}
	t.Skipf("requires %s: %s", what, why)
}
