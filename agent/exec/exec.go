// Package exec runs commands in the guest for the daemon: POST /1.0/exec
// on the agent's link port answers an operation whose websockets
// (GET /1.0/operations/{id}/websocket?secret=S) carry stdin, stdout,
// stderr and control, LXD's shapes. Output is streamed as it comes; an
// interactive command gets a pseudo-terminal. A command never inherits the
// agent's environment.
package exec

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/link/devlxdapi"
)

// Defaults of Server.
const (
	// DefaultWebsocketTimeout is how long an operation waits for its
	// websockets before it fails.
	DefaultWebsocketTimeout = time.Minute
	// DefaultPath is the command's PATH unless the request sets one.
	DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// keepFinished is how many finished operations are kept for GET.
	keepFinished = 100
	// maxBody bounds a POST /1.0/exec body.
	maxBody = 1 << 20
	// chunk is the largest output message.
	chunk = 32 << 10
	// drainWait bounds reading a terminal's last output once the command
	// ended while a background process still holds the terminal.
	drainWait = 2 * time.Second
)

// Server serves the exec routes of the agent's link port. The zero value
// is not usable: set Root.
type Server struct {
	// Root is the guest's root: the default working directory, and the
	// directory a request's cwd is taken under ("/" in a VM, the stand-in
	// root of a sim guest).
	Root string
	// Log receives one line per exec; nil discards.
	Log *slog.Logger
	// WebsocketTimeout is how long an operation waits for its websockets
	// (DefaultWebsocketTimeout if zero).
	WebsocketTimeout time.Duration

	mu       sync.Mutex
	ops      map[string]*operation
	finished []string
	wg       sync.WaitGroup
}

var _ http.Handler = (*Server)(nil)

// Handles reports whether the path is one of the exec routes.
func Handles(path string) bool {
	return path == "/1.0/exec" || strings.HasPrefix(path, "/1.0/operations/")
}

// ServeHTTP serves POST /1.0/exec and GET /1.0/operations/{id}[/wait|/websocket].
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/1.0/exec" {
		if r.Method != http.MethodPost {
			writeError(w, http.StatusMethodNotAllowed, "")
			return
		}
		s.start(w, r)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/1.0/operations/")
	if !ok {
		writeError(w, http.StatusNotFound, "")
		return
	}
	id, sub, _ := strings.Cut(rest, "/")
	op := s.get(id)
	if op == nil {
		writeError(w, http.StatusNotFound, "Operation not found")
		return
	}
	if r.Method != http.MethodGet {
		writeError(w, http.StatusMethodNotAllowed, "")
		return
	}
	switch sub {
	case "":
		writeSync(w, op.snapshot())
	case "wait":
		s.wait(w, r, op)
	case "websocket":
		s.websocket(w, r, op)
	default:
		writeError(w, http.StatusNotFound, "")
	}
}

// Wait waits for every command started by s to end (for tests and for a
// clean agent stop).
func (s *Server) Wait() { s.wg.Wait() }

func (s *Server) logger() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}

func (s *Server) get(id string) *operation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ops[id]
}

func (s *Server) start(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid request body: %v", err))
		return
	}
	var req api.ExecPost
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid request body: %v", err))
		return
	}
	if err := req.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	cmd, err := s.command(&req)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	op := newOperation(&req, cmd)
	s.mu.Lock()
	if s.ops == nil {
		s.ops = map[string]*operation{}
	}
	s.ops[op.id] = op
	s.mu.Unlock()
	timeout := s.WebsocketTimeout
	if timeout <= 0 {
		timeout = DefaultWebsocketTimeout
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		op.run(timeout, s.logger())
		s.retire(op.id)
	}()
	b, err := json.Marshal(api.Async("/1.0/operations/"+op.id, op.snapshot()))
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/1.0/operations/"+op.id)
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write(b)
}

// retire keeps the last keepFinished finished operations.
func (s *Server) retire(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished = append(s.finished, id)
	if len(s.finished) > keepFinished {
		delete(s.ops, s.finished[0])
		s.finished = s.finished[1:]
	}
}

// command builds the command of req: clean environment, working directory
// under Root, credentials.
func (s *Server) command(req *api.ExecPost) (*osexec.Cmd, error) {
	root := s.Root
	if root == "" {
		root = "/"
	}
	env := map[string]string{"PATH": DefaultPath}
	if root == "/" && req.User == 0 {
		env["HOME"] = "/root"
	} else {
		env["HOME"] = root
	}
	if req.Interactive {
		env["TERM"] = "xterm"
	}
	for k, v := range req.Environment {
		env[k] = v
	}
	cwd := root
	if req.Cwd != "" {
		cwd = filepath.Join(root, filepath.Clean("/"+req.Cwd))
	}
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("cwd %q is not a directory in the guest", req.Cwd)
	}
	prog, err := lookPath(req.Command[0], env["PATH"], cwd)
	if err != nil {
		return nil, err
	}
	cmd := &osexec.Cmd{Path: prog, Args: req.Command, Dir: cwd}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	switch {
	case uid == 0:
		// Groups empty: the command gets no supplementary group of the agent.
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: req.User, Gid: req.Group, Groups: []uint32{}}
	case (req.User == 0 || req.User == uid) && (req.Group == 0 || req.Group == gid):
		// An unprivileged agent (a sim guest): the guest's root is the
		// agent's own user.
	default:
		return nil, fmt.Errorf("user %d group %d: the agent runs unprivileged (uid %d) and cannot change user", req.User, req.Group, uid)
	}
	return cmd, nil
}

// lookPath finds prog in path (the command's PATH, not the agent's);
// relative directories of path are taken from cwd.
func lookPath(prog, path, cwd string) (string, error) {
	if strings.Contains(prog, "/") {
		if !filepath.IsAbs(prog) {
			prog = filepath.Join(cwd, prog)
		}
		return prog, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(cwd, dir)
		}
		p := filepath.Join(dir, prog)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("command %q not found in PATH %q", prog, path)
}

// wait answers GET /1.0/operations/{id}/wait[?timeout=N] (seconds, -1 or
// absent: until it ends).
func (s *Server) wait(w http.ResponseWriter, r *http.Request, op *operation) {
	timeout := -1
	if t := r.URL.Query().Get("timeout"); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil {
			writeError(w, http.StatusBadRequest, "Invalid timeout value")
			return
		}
		timeout = n
	}
	var expired <-chan time.Time
	if timeout >= 0 {
		t := time.NewTimer(time.Duration(timeout) * time.Second)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-op.done:
	case <-expired:
	case <-r.Context().Done():
		return
	}
	writeSync(w, op.snapshot())
}

var upgrader = websocket.Upgrader{
	ReadBufferSize:  chunk,
	WriteBufferSize: chunk,
	// Only the daemon reaches the link port (pinned client certificate).
	CheckOrigin: func(*http.Request) bool { return true },
}

// websocket connects one of op's fds, found by its secret.
func (s *Server) websocket(w http.ResponseWriter, r *http.Request, op *operation) {
	secret := r.URL.Query().Get("secret")
	fd := ""
	for name, sec := range op.secrets {
		if subtle.ConstantTimeCompare([]byte(sec), []byte(secret)) == 1 {
			fd = name
		}
	}
	if fd == "" {
		writeError(w, http.StatusForbidden, "Wrong websocket secret")
		return
	}
	if !op.claim(fd) {
		writeError(w, http.StatusConflict, fmt.Sprintf("Websocket %s is already connected", fd))
		return
	}
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		op.unclaim(fd)
		return
	}
	op.connect(fd, conn)
}

// newSecret returns 32 random bytes in hex.
func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newID returns a random UUID (version 4).
func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(devlxdapi.ErrorResponse(code, msg))
}

func writeSync(w http.ResponseWriter, v any) {
	b, err := devlxdapi.SyncResponse(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// errWebsocketTimeout fails an operation whose websockets did not all come.
var errWebsocketTimeout = errors.New("timed out waiting for the websockets")
