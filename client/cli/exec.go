package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
)

// commandExit is the exit code of a command run by guestlink exec: Execute
// returns it without printing an error.
type commandExit struct{ code int }

func (e *commandExit) Error() string { return fmt.Sprintf("command exited with %d", e.code) }

func (s *session) execCommand() *cobra.Command {
	var env []string
	var cwd string
	var user, group uint32
	var forceTTY, noTTY bool
	cmd := &cobra.Command{
		Use:   "exec NAME [--env K=V] [--cwd DIR] [--user UID] [-T|-t] -- CMD...",
		Short: "Run a command in an instance through its agent",
		Long: `Run a command in an instance's guest through its agent (which must be
CONNECTED): as LXD's "lxc exec". The command is not run through a shell: give
"sh -c '...'" for one. It gets a clean environment: PATH, HOME, TERM (with a
terminal) and the --env variables, nothing of guestlink's.

With a terminal on stdin and stdout (or -t), the command runs on a
pseudo-terminal of the same size, which follows window size changes; Ctrl-C
goes to the command. Without (or -T), its stdout and stderr come back
separately. SIGINT, SIGTERM, SIGHUP and SIGQUIT received by guestlink are
sent to the command. guestlink exits with the command's exit code.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return fmt.Errorf("%s takes NAME and a command (usage: %s)", cmd.CommandPath(), cmd.UseLine())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if forceTTY && noTTY {
				return fmt.Errorf("-t and -T exclude each other")
			}
			req := api.ExecPost{Command: args[1:], Environment: map[string]string{}, Cwd: cwd, User: user, Group: group}
			for _, kv := range env {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return fmt.Errorf("invalid --env %q: want KEY=VALUE", kv)
				}
				req.Environment[k] = v
			}
			return s.exec(cmd, args[0], req, forceTTY, noTTY)
		},
	}
	cmd.Flags().StringArrayVar(&env, "env", nil, "set an environment variable of the command (KEY=VALUE, repeatable)")
	cmd.Flags().StringVar(&cwd, "cwd", "", "working directory of the command inside the guest (default: the guest's root)")
	cmd.Flags().Uint32Var(&user, "user", 0, "uid to run the command as")
	cmd.Flags().Uint32Var(&group, "group", 0, "gid to run the command as")
	cmd.Flags().BoolVarP(&forceTTY, "force-interactive", "t", false, "run on a pseudo-terminal even without a terminal")
	cmd.Flags().BoolVarP(&noTTY, "force-noninteractive", "T", false, "never use a pseudo-terminal")
	return cmd
}

// terminalSize returns the size of the terminal on f, if it is one.
func terminalSize(f *os.File) (client.TermSize, bool) {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 || ws.Row == 0 {
		return client.TermSize{}, false
	}
	return client.TermSize{Width: int(ws.Col), Height: int(ws.Row)}, true
}

func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// makeRaw puts the terminal on f in raw mode and returns how to restore it.
func makeRaw(f *os.File) (func(), error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN] = 1
	raw.Cc[unix.VTIME] = 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, err
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}

// exec runs req in the instance and returns the command's exit code as a
// *commandExit (nil for 0).
func (s *session) exec(cmd *cobra.Command, name string, req api.ExecPost, forceTTY, noTTY bool) error {
	stdin, stdout := cmd.InOrStdin(), cmd.OutOrStdout()
	interactive := !noTTY && (forceTTY || (isTerminal(stdin) && isTerminal(stdout)))
	req.Interactive = interactive
	streams := client.ExecIO{Stdin: stdin, Stdout: stdout, Stderr: cmd.ErrOrStderr()}
	sigs := make(chan os.Signal, 8)
	forward := []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}
	var resize chan client.TermSize
	if interactive {
		req.Width, req.Height = 80, 24
		if f, ok := stdout.(*os.File); ok {
			if sz, ok := terminalSize(f); ok {
				req.Width, req.Height = sz.Width, sz.Height
			}
		}
		if f, ok := stdin.(*os.File); ok && isTerminal(f) {
			restore, err := makeRaw(f)
			if err != nil {
				return fmt.Errorf("setting the terminal to raw mode: %w", err)
			}
			defer restore()
		}
		resize = make(chan client.TermSize, 1)
		forward = append(forward, syscall.SIGWINCH)
	}
	signal.Notify(sigs, forward...)
	defer signal.Stop(sigs)
	signals := make(chan int, 8)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case sig := <-sigs:
				if sig == syscall.SIGWINCH {
					if f, ok := stdout.(*os.File); ok {
						if sz, ok := terminalSize(f); ok {
							select {
							case resize <- sz:
							default:
							}
						}
					}
					continue
				}
				select {
				case signals <- int(sig.(syscall.Signal)):
				default:
				}
			}
		}
	}()
	streams.Resize, streams.Signal = resize, signals
	// Signals go to the command, not to guestlink: the command's end, not
	// an interrupt, ends the exec.
	ctx := context.WithoutCancel(cmd.Context())
	code, err := s.client.Exec(ctx, name, req, streams)
	if err != nil {
		return err
	}
	if code != 0 {
		return &commandExit{code: code}
	}
	return nil
}
