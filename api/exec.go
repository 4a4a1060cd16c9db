package api

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
	"unicode/utf8"
)

// TypeAsync is the envelope type of an answer that started an operation
// (202, Operation set to the operation's URL, the operation as metadata).
const TypeAsync = "async"

// Operation classes and statuses (LXD's).
const (
	OperationClassWebsocket = "websocket"
	OperationClassTask      = "task"

	OperationRunning = "Running"
	OperationSuccess = "Success"
	OperationFailure = "Failure"

	OperationRunningCode = 103
	OperationSuccessCode = 200
	OperationFailureCode = 400
)

// Websocket names of an exec operation's fds: stdin, stdout, stderr and the
// control socket. An interactive exec has only ExecFDStdin (the terminal,
// both ways) and ExecFDControl.
const (
	ExecFDStdin   = "0"
	ExecFDStdout  = "1"
	ExecFDStderr  = "2"
	ExecFDControl = "control"
)

// Limits of an exec request.
const (
	// MaxExecArgs is the most arguments a command may have.
	MaxExecArgs = 4096
	// MaxExecEnv is the most environment variables a request may set.
	MaxExecEnv = 1024
	// MaxTermSize is the largest width or height of a terminal.
	MaxTermSize = 10000
)

// ExecPost is the body of POST /1.0/instances/{name}/exec on the admin API
// and of POST /1.0/exec on the agent's link port: LXD's InstanceExecPost.
// The command runs with an environment made only of Environment and
// defaults for PATH, HOME and (interactive) TERM.
type ExecPost struct {
	// Command is the program and its arguments (not run through a shell).
	Command []string `json:"command"`
	// Environment is added to the command's clean environment.
	Environment map[string]string `json:"environment"`
	// WaitForWS holds the command until every websocket is connected; false
	// runs it at once with no input and its output discarded.
	WaitForWS bool `json:"wait-for-websocket"`
	// Interactive runs the command on a pseudo-terminal of Width x Height.
	Interactive bool `json:"interactive"`
	Width       int  `json:"width"`
	Height      int  `json:"height"`
	// User and Group are the uid and gid of the command (0: the guest's root).
	User  uint32 `json:"user"`
	Group uint32 `json:"group"`
	// Cwd is the absolute working directory inside the guest ("" the guest's root).
	Cwd string `json:"cwd"`
	// RecordOutput is LXD's output recording: not supported, accepted
	// only false (lxc sends it).
	RecordOutput bool `json:"record-output"`
}

// Validate checks an exec request and names the first thing wrong with it.
func (p *ExecPost) Validate() error {
	if len(p.Command) == 0 || p.Command[0] == "" {
		return errors.New("command is empty: give the program to run")
	}
	if len(p.Command) > MaxExecArgs {
		return fmt.Errorf("command has %d arguments, more than %d", len(p.Command), MaxExecArgs)
	}
	for i, a := range p.Command {
		if strings.IndexByte(a, 0) >= 0 || !utf8.ValidString(a) {
			return fmt.Errorf("command argument %d is not valid UTF-8 without NUL bytes", i)
		}
	}
	if len(p.Environment) > MaxExecEnv {
		return fmt.Errorf("environment has %d variables, more than %d", len(p.Environment), MaxExecEnv)
	}
	for k, v := range p.Environment {
		if err := ValidEnvKey(k); err != nil {
			return err
		}
		if strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("environment variable %q: the value contains a NUL byte", k)
		}
	}
	if p.Width < 0 || p.Height < 0 || p.Width > MaxTermSize || p.Height > MaxTermSize {
		return fmt.Errorf("terminal size %dx%d out of range (0..%d)", p.Width, p.Height, MaxTermSize)
	}
	if p.RecordOutput {
		return errors.New("record-output is not supported: read the output from the websockets")
	}
	if p.Cwd != "" {
		if !path.IsAbs(p.Cwd) || strings.IndexByte(p.Cwd, 0) >= 0 {
			return fmt.Errorf("cwd %q is not an absolute path", p.Cwd)
		}
	}
	return nil
}

// ValidEnvKey reports why k cannot name an environment variable: it must be
// non-empty, of letters, digits and underscores, and not start with a digit.
func ValidEnvKey(k string) error {
	if k == "" {
		return errors.New("environment variable with an empty name")
	}
	for i, r := range k {
		ok := r == '_' || (r >= 'A' && r <= 'Z') || (r >= 'a' && r <= 'z') || (i > 0 && r >= '0' && r <= '9')
		if !ok {
			return fmt.Errorf("environment variable name %q is invalid: use letters, digits and _, not starting with a digit", k)
		}
	}
	return nil
}

// ExecMetadata is the metadata of an exec operation: the websocket secrets
// by fd name while it runs, and the command's exit code once it is done.
type ExecMetadata struct {
	FDs    map[string]string `json:"fds,omitempty"`
	Return *int              `json:"return,omitempty"`
}

// Operation is LXD's operation object. guestlink's operations are execs:
// Metadata is their ExecMetadata.
type Operation struct {
	ID          string              `json:"id"`
	Class       string              `json:"class"`
	Description string              `json:"description"`
	CreatedAt   time.Time           `json:"created_at"`
	UpdatedAt   time.Time           `json:"updated_at"`
	Status      string              `json:"status"`
	StatusCode  int                 `json:"status_code"`
	Resources   map[string][]string `json:"resources"`
	Metadata    ExecMetadata        `json:"metadata"`
	MayCancel   bool                `json:"may_cancel"`
	Err         string              `json:"err"`
	Location    string              `json:"location"`
}

// Done reports whether the operation has ended (success or failure).
func (o *Operation) Done() bool { return o.StatusCode >= OperationSuccessCode }

// ExecControl is a message of an exec's control websocket (text, JSON):
// Command "window-resize" with Args "width" and "height" (decimal
// strings), or "signal" with Signal (a signal number).
type ExecControl struct {
	Command string            `json:"command"`
	Args    map[string]string `json:"args,omitempty"`
	Signal  int               `json:"signal,omitempty"`
}

// Control commands of ExecControl.
const (
	ExecControlResize = "window-resize"
	ExecControlSignal = "signal"
)

// Async returns the envelope of an answer that started op, reachable at
// url (/1.0/operations/{id}).
func Async(url string, op any) Response[any] {
	return Response[any]{Type: TypeAsync, Status: "Operation created", StatusCode: 100, Operation: url, Metadata: op}
}
