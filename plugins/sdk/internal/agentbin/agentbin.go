// Package agentbin builds guestlink-agent for the SDK's own tests, which
// run the conformance kit's Agent subtest against real agents. The agent
// is the daemon module's (cmd/guestlink-agent), not the SDK's: it is built
// from the repository the SDK sits in. An author outside the repository
// installs it instead (go install
// github.com/guestlink/guestlink/cmd/guestlink-agent@VERSION).
package agentbin

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// rootModule is the module line of the repository's root go.mod.
const rootModule = "module github.com/guestlink/guestlink\n"

// Build builds guestlink-agent into dir and returns its path. It finds
// the repository root from the working directory upwards.
func Build(dir string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	root := wd
	for {
		data, err := os.ReadFile(filepath.Join(root, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte(rootModule)) {
			break
		}
		parent := filepath.Dir(root)
		if parent == root {
			return "", errors.New("building guestlink-agent: no github.com/guestlink/guestlink module above " + wd)
		}
		root = parent
	}
	out := filepath.Join(dir, "guestlink-agent")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./cmd/guestlink-agent")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building guestlink-agent in %s: %v\n%s", root, err, msg)
	}
	return out, nil
}
