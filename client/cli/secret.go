package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/guestlink/guestlink/errdefs"
)

// maxSecret bounds a secret read from a file or stdin.
const maxSecret = 64 << 10

// StdinSecret is the value of a secret flag (--token -) that reads the
// secret from stdin instead of taking it from argv, where every local user
// sees it in ps.
const StdinSecret = "-"

// secretFlag is a secret given as --NAME VALUE (argv, discouraged),
// --NAME - (one line of stdin) or --NAME-file PATH.
type secretFlag struct {
	name        string // the flag, e.g. "token"
	value, file string
}

// add adds --NAME and --NAME-file to cmd.
func (f *secretFlag) add(cmd *cobra.Command, usage string) {
	cmd.Flags().StringVar(&f.value, f.name, "", usage+": - reads it from stdin; a literal value is visible to other local users in ps (prefer --"+f.name+"-file or -)")
	cmd.Flags().StringVar(&f.file, f.name+"-file", "", "read the "+usage+" from this file (its first line)")
}

// read returns the secret ("" when neither flag is given). A value given in
// argv draws a warning on stderr.
func (f *secretFlag) read(cmd *cobra.Command) (string, error) {
	var raw []byte
	var from string
	switch {
	case f.value != "" && f.file != "":
		return "", fmt.Errorf("give --%s or --%s-file, not both: %w", f.name, f.name, errdefs.ErrInvalid)
	case f.file != "":
		from = f.file
		fh, err := os.Open(f.file)
		if err != nil {
			return "", fmt.Errorf("reading the %s: %w", f.name, err)
		}
		defer fh.Close()
		if raw, err = io.ReadAll(io.LimitReader(fh, maxSecret+1)); err != nil {
			return "", fmt.Errorf("reading the %s from %s: %w", f.name, f.file, err)
		}
	case f.value == StdinSecret:
		from = "stdin"
		var err error
		if raw, err = readSecretLine(cmd, f.name); err != nil {
			return "", fmt.Errorf("reading the %s from stdin: %w", f.name, err)
		}
	case f.value != "":
		fmt.Fprintf(cmd.ErrOrStderr(), "Warning: --%s VALUE is visible to every local user (ps); use --%s-file PATH or --%s - (stdin)\n", f.name, f.name, f.name)
		return f.value, nil
	default:
		return "", nil
	}
	if len(raw) > maxSecret {
		return "", fmt.Errorf("the %s in %s is over %d bytes: %w", f.name, from, maxSecret, errdefs.ErrInvalid)
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	secret := strings.TrimSpace(line)
	if secret == "" {
		return "", fmt.Errorf("no %s in %s: %w", f.name, from, errdefs.ErrInvalid)
	}
	if strings.ContainsFunc(secret, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return "", fmt.Errorf("the %s in %s holds spaces or control characters: %w", f.name, from, errdefs.ErrInvalid)
	}
	return secret, nil
}

// readSecretLine reads one line of the command's stdin, byte by byte so
// nothing after it is consumed; on a terminal it prompts on stderr and
// turns echo off meanwhile.
func readSecretLine(cmd *cobra.Command, what string) ([]byte, error) {
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); ok {
		if t, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err == nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: ", strings.ToUpper(what[:1])+what[1:])
			quiet := *t
			quiet.Lflag &^= unix.ECHO
			if unix.IoctlSetTermios(int(f.Fd()), unix.TCSETS, &quiet) == nil {
				defer func() {
					_ = unix.IoctlSetTermios(int(f.Fd()), unix.TCSETS, t)
					fmt.Fprintln(cmd.ErrOrStderr())
				}()
			}
		}
	}
	var line []byte
	b := make([]byte, 1)
	for len(line) <= maxSecret {
		n, err := in.Read(b)
		if n == 1 {
			if b[0] == '\n' {
				return line, nil
			}
			line = append(line, b[0])
		}
		if errors.Is(err, io.EOF) {
			return line, nil
		}
		if err != nil {
			return nil, err
		}
	}
	return line, nil
}
