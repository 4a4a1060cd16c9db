package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/errdefs"
)

func (s *session) fileCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "file",
		Short: "Push, pull and delete files inside a guest (through its agent)",
		Long: `Push, pull and delete files inside a running guest, as "lxc file" does. The
files travel through the guest's agent over the link, streamed; the guest's
admin can switch this off (features.files: false in /etc/guestlink-agent.yaml),
and symlinks never lead out of the guest's root.`,
	}
	cmd.AddCommand(s.filePushCommand(), s.filePullCommand(), s.fileDeleteCommand())
	return cmd
}

// pushOpts are the flags of file push.
type pushOpts struct {
	parents, recursive bool
	uid, gid           int
	mode               string
}

func (s *session) filePushCommand() *cobra.Command {
	var o pushOpts
	cmd := &cobra.Command{
		Use:   "push SRC... NAME/PATH [-p] [-r] [--uid N] [--gid N] [--mode 0644]",
		Short: "Copy local files into a guest",
		Long: `Copy local files into a guest. With one SRC and a PATH not ending in "/",
PATH is the file written; otherwise each SRC goes into the directory PATH
under its own name. -p creates PATH's missing parent directories, -r copies
directories recursively (symlinks as symlinks). --uid, --gid and --mode set
the owner and mode of what is written; without --mode a file keeps its
local mode. On a terminal, a file of 1 MiB or more shows its progress
(bytes, rate) on standard error while it is copied.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, dst, err := client.SplitInstancePath(args[len(args)-1])
			if err != nil {
				return err
			}
			srcs := args[:len(args)-1]
			var base client.FileArgs
			if cmd.Flags().Changed("uid") {
				base.UID = &o.uid
			}
			if cmd.Flags().Changed("gid") {
				base.GID = &o.gid
			}
			if o.mode != "" {
				m, err := client.ParseMode(o.mode)
				if err != nil {
					return err
				}
				base.Mode = &m
			}
			intoDir := len(srcs) > 1 || strings.HasSuffix(dst, "/")
			p := &pusher{s: s, cmd: cmd, name: name, base: base}
			if o.parents {
				dir := dst
				if !intoDir {
					dir = path.Dir(dst)
				}
				if err := p.mkdirAll(dir); err != nil {
					return err
				}
			}
			for _, src := range srcs {
				target := dst
				if intoDir {
					target = path.Join(dst, filepath.Base(src))
				}
				if err := p.push(src, target, o.recursive); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&o.parents, "create-dirs", "p", false, "create the missing parent directories of PATH")
	cmd.Flags().BoolVarP(&o.recursive, "recursive", "r", false, "copy directories recursively")
	cmd.Flags().IntVar(&o.uid, "uid", -1, "owner uid of what is written")
	cmd.Flags().IntVar(&o.gid, "gid", -1, "owner gid of what is written")
	cmd.Flags().StringVar(&o.mode, "mode", "", "mode of what is written, octal (0644)")
	return cmd
}

// pusher pushes local paths into one guest.
type pusher struct {
	s    *session
	cmd  *cobra.Command
	name string
	base client.FileArgs
}

// mkdirAll creates dir and its parents in the guest (existing ones are
// left as they are).
func (p *pusher) mkdirAll(dir string) error {
	cur := "/"
	for _, el := range strings.Split(strings.Trim(path.Clean(dir), "/"), "/") {
		if el == "" {
			continue
		}
		cur = path.Join(cur, el)
		f, err := p.s.client.PullFile(p.cmd.Context(), p.name, cur)
		if err == nil {
			if f.Body != nil {
				f.Body.Close()
			}
			if f.Type != client.FileTypeDirectory {
				return fmt.Errorf("creating %q in instance %q: %q is a %s, not a directory: %w", dir, p.name, cur, f.Type, errdefs.ErrConflict)
			}
			continue
		}
		if !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
		if err := p.s.client.PushFile(p.cmd.Context(), p.name, cur, nil, 0, client.FileArgs{Type: client.FileTypeDirectory}); err != nil {
			return err
		}
	}
	return nil
}

// push copies the local src to target in the guest.
func (p *pusher) push(src, target string, recursive bool) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return fmt.Errorf("pushing %s: %w", src, err)
	}
	args := p.base
	ctx := p.cmd.Context()
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		link, err := os.Readlink(src)
		if err != nil {
			return fmt.Errorf("pushing %s: %w", src, err)
		}
		args.Type, args.Mode = client.FileTypeSymlink, nil
		return p.s.client.PushFile(ctx, p.name, target, strings.NewReader(link), int64(len(link)), args)
	case fi.IsDir():
		if !recursive {
			return fmt.Errorf("pushing %s: a directory: use -r: %w", src, errdefs.ErrInvalid)
		}
		args.Type = client.FileTypeDirectory
		if args.Mode == nil {
			m := fi.Mode() & (fs.ModePerm | fs.ModeSetgid | fs.ModeSticky)
			args.Mode = &m
		}
		if err := p.s.client.PushFile(ctx, p.name, target, nil, 0, args); err != nil {
			return err
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			return fmt.Errorf("pushing %s: %w", src, err)
		}
		for _, e := range entries {
			if err := p.push(filepath.Join(src, e.Name()), path.Join(target, e.Name()), true); err != nil {
				return err
			}
		}
		return nil
	case fi.Mode().IsRegular():
		f, err := os.Open(src)
		if err != nil {
			return fmt.Errorf("pushing %s: %w", src, err)
		}
		defer f.Close()
		args.Type = client.FileTypeFile
		if args.Mode == nil {
			m := fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
			args.Mode = &m
		}
		tr := newTransfer(p.cmd.ErrOrStderr(), drawTransfers(p.cmd), fi.Size(), "push "+filepath.Base(src))
		defer tr.done()
		return p.s.client.PushFile(ctx, p.name, target, tr.reader(f), fi.Size(), args)
	}
	return fmt.Errorf("pushing %s: not a regular file, directory or symlink: %w", src, errdefs.ErrInvalid)
}

func (s *session) filePullCommand() *cobra.Command {
	var recursive bool
	cmd := &cobra.Command{
		Use:   "pull NAME/PATH... DST [-r]",
		Short: "Copy files out of a guest",
		Long: `Copy files out of a guest into DST: a local file, an existing directory
(each PATH goes in under its own name) or "-" for standard output. -r copies
directories recursively (symlinks as symlinks). On a terminal, a file of
1 MiB or more (or of unknown size) pulled into a local file shows its
progress (bytes, rate) on standard error.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			dst := args[len(args)-1]
			srcs := args[:len(args)-1]
			dstDir := false
			if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
				dstDir = true
			} else if len(srcs) > 1 {
				return fmt.Errorf("pulling %d paths: %s is not a directory: %w", len(srcs), dst, errdefs.ErrInvalid)
			}
			for _, src := range srcs {
				name, p, err := client.SplitInstancePath(src)
				if err != nil {
					return err
				}
				target := dst
				if dstDir {
					target = filepath.Join(dst, path.Base(p))
				}
				if err := s.pull(cmd, name, p, target, recursive); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "copy directories recursively")
	return cmd
}

// pull copies the guest's p to the local target.
func (s *session) pull(cmd *cobra.Command, name, p, target string, recursive bool) error {
	f, err := s.client.PullFile(cmd.Context(), name, p)
	if err != nil {
		return err
	}
	switch f.Type {
	case client.FileTypeFile:
		defer f.Body.Close()
		if target == "-" {
			if _, err := io.Copy(cmd.OutOrStdout(), f.Body); err != nil {
				return fmt.Errorf("pulling %q from instance %q: %w", p, name, err)
			}
			return nil
		}
		out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, f.Mode.Perm())
		if err != nil {
			return fmt.Errorf("pulling %q from instance %q: %w", p, name, err)
		}
		tr := newTransfer(cmd.ErrOrStderr(), drawTransfers(cmd), f.Size, "pull "+path.Base(p))
		_, err = io.Copy(tr.writer(out), f.Body)
		tr.done()
		if err != nil {
			out.Close()
			return fmt.Errorf("pulling %q from instance %q into %s: %w", p, name, target, err)
		}
		if err := out.Close(); err != nil {
			return fmt.Errorf("pulling %q from instance %q into %s: %w", p, name, target, err)
		}
		return os.Chmod(target, f.Mode.Perm())
	case client.FileTypeSymlink:
		if target == "-" {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), f.Target)
			return err
		}
		return os.Symlink(f.Target, target)
	default: // directory
		if !recursive {
			return fmt.Errorf("pulling %q from instance %q: a directory: use -r: %w", p, name, errdefs.ErrInvalid)
		}
		if target == "-" {
			return fmt.Errorf("pulling directory %q: not to standard output: %w", p, errdefs.ErrInvalid)
		}
		if err := os.Mkdir(target, f.Mode.Perm()|0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("pulling %q from instance %q: %w", p, name, err)
		}
		for _, e := range f.Entries {
			if err := s.pull(cmd, name, path.Join(p, e), filepath.Join(target, e), true); err != nil {
				return err
			}
		}
		return nil
	}
}

func (s *session) fileDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME/PATH...",
		Short: "Delete files (or empty directories) inside a guest",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, a := range args {
				name, p, err := client.SplitInstancePath(a)
				if err != nil {
					return err
				}
				if err := s.client.DeleteFile(cmd.Context(), name, p); err != nil {
					return err
				}
			}
			return nil
		},
	}
}
