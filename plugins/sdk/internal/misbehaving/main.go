// Command misbehaving is the misbehaving test plugin: the example backend
// (plugins/sdk/example) behind a wrapper that misbehaves on request, used
// to test the SDK's Launch, the conformance kit (that it can fail) and the
// daemon's plugin host and supervisor against a real misbehaving process.
// It reports its name as "misbehaving".
//
// It misbehaves on request: if MISBEHAVING_BEHAVIOUR_DIR is set, the file
// <dir>/<binary name>.json is read at start and before every call, with the
// fields of behaviour (crash on a call, hang, garbage on stdout, exit after
// a delay ...). Tests change the file between restarts.
package main

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sdk/example"
)

// behaviour is the misbehaviour a test asks for.
type behaviour struct {
	GarbageStdout bool   `json:"garbage_stdout"` // print a line to stdout before the handshake
	ExitAtStart   bool   `json:"exit_at_start"`  // exit with status 3 before the handshake
	StartDelay    string `json:"start_delay"`    // sleep this long before the handshake
	ExitAfter     string `json:"exit_after"`     // exit with status 4 this long after start
	CrashOn       string `json:"crash_on"`       // exit with status 5 when this method is called
	HangOn        string `json:"hang_on"`        // never answer this method
	Version       string `json:"version"`        // reported by Info
	LinkKind      string `json:"link_kind"`      // LinkEndpoint answers this kind (announced or not)
	InstanceType  string `json:"instance_type"`  // reported by Info
	EventEvery    string `json:"event_every"`    // send a ring-data event of guest "chatty" this often on every stream
	// Missing is reported by Info (read at every call, so a test can
	// "install" what was missing without a restart).
	Missing []sdk.Missing `json:"missing"`
}

// readBehaviour loads the behaviour file of this binary; no file means
// behave.
func readBehaviour() behaviour {
	var b behaviour
	dir := os.Getenv("MISBEHAVING_BEHAVIOUR_DIR")
	if dir == "" {
		return b
	}
	data, err := os.ReadFile(filepath.Join(dir, filepath.Base(os.Args[0])+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return b
	}
	if err != nil {
		sdk.Logger().Error("reading behaviour", "error", err)
		return b
	}
	if err := json.Unmarshal(data, &b); err != nil {
		sdk.Logger().Error("parsing behaviour", "error", err)
	}
	return b
}

func duration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0
	}
	return d
}

func main() {
	b := readBehaviour()
	if b.GarbageStdout {
		os.Stdout.WriteString("hello from a plugin that should not talk here\n")
	}
	if b.ExitAtStart {
		os.Stderr.WriteString("misbehaving: exiting at start as asked\n")
		os.Exit(3)
	}
	if d := duration(b.StartDelay); d > 0 {
		time.Sleep(d)
	}
	if d := duration(b.ExitAfter); d > 0 {
		time.AfterFunc(d, func() {
			sdk.Logger().Warn("exiting as asked", "after", d)
			os.Exit(4)
		})
	}
	sdk.Serve(&backend{Backend: example.New(b.Version), instanceType: b.InstanceType})
}
