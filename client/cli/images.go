package cli

import (
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/guestlink/guestlink/api"
)

func (s *session) imageCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Manage the daemon's disk images",
		Long: `Manage the daemon's image store: disk images (raw or qcow2) kept in the
state directory under images/, by the sha256 of their content, with aliases.
"guestlink launch IMAGE NAME" boots an instance from an image (alias,
fingerprint or fingerprint prefix) on a backend that announces disk.v1.`,
		Args: argsExactly(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	alias := &cobra.Command{Use: "alias", Short: "Manage image aliases", Args: argsExactly(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	alias.AddCommand(s.imageAliasCreateCommand(), s.imageAliasListCommand(), s.imageAliasDeleteCommand())
	cmd.AddCommand(s.imageImportCommand(), s.imageListCommand(), s.imageInfoCommand(), s.imageSetCommand(), s.imageDeleteCommand(), alias, s.imageBuildCommand(), s.imageProgressCommand())
	return cmd
}

func (s *session) imageImportCommand() *cobra.Command {
	var alias, kernel, initrd string
	var props []string
	var public bool
	cmd := &cobra.Command{
		Use:   "import FILE [--alias NAME] [--property key=value ...] [--public]",
		Short: "Copy a disk image file into the image store",
		Long: `Copy the disk image FILE (raw or qcow2; a file on the daemon's machine,
read by the daemon, which streams it through sha256) into the image store.
From a raw ext4 image the daemon takes the newest /boot/vmlinuz-* and its
initrd for direct boot; --kernel and --initrd give them instead.

FILE must be a regular file holding a raw ext2/3/4 filesystem or a qcow2
image (checked by magic before anything is copied), no larger than the
daemon's --image-max-size (default 64GiB, apparent size). The copy is
sparse and must fit in the free space of the daemon's image directory
(else 507, saying how much is needed and available); interrupting the
command stops the copy. On a terminal (standard output and error both
terminals) the copy's progress is drawn on standard error: data copied,
rate and time left; piped or redirected, the command stays quiet. See
docs/guests.md.

An image is private unless --public: only a public image can be downloaded
by guests through devlxd (security.devlxd.images=true), as in LXD.`,
		Args: argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := parseKeyValues(props, "property")
			if err != nil {
				return err
			}
			req := api.ImagesPost{Alias: alias, Properties: p, Public: public}
			for _, f := range []struct {
				in  string
				out *string
			}{{args[0], &req.Path}, {kernel, &req.Kernel}, {initrd, &req.Initrd}} {
				if f.in == "" {
					continue
				}
				if *f.out, err = filepath.Abs(f.in); err != nil {
					return fmt.Errorf("importing image %q: %w", f.in, err)
				}
			}
			stop := watchImport(cmd.Context(), cmd.ErrOrStderr(), drawTransfers(cmd), req.Path, s.client.ImageImports)
			im, err := s.client.ImportImage(cmd.Context(), req)
			stop()
			if err != nil {
				return err
			}
			return s.render(im, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "Image imported with fingerprint: %s\n", im.Fingerprint)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&alias, "alias", "", "alias of the new image")
	cmd.Flags().StringArrayVarP(&props, "property", "p", nil, "property key=value to record (repeatable)")
	cmd.Flags().StringVar(&kernel, "kernel", "", "kernel for direct boot (instead of the image's /boot)")
	cmd.Flags().StringVar(&initrd, "initrd", "", "initrd for direct boot (with --kernel)")
	cmd.Flags().BoolVar(&public, "public", false, "let guests download the image through devlxd")
	return cmd
}

func aliasNames(im api.Image) string {
	names := make([]string, len(im.Aliases))
	for i, a := range im.Aliases {
		names[i] = a.Name
	}
	return strings.Join(names, ",")
}

func (s *session) imageListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the images of the store",
		Args:  argsExactly(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := s.client.Images(cmd.Context())
			if err != nil {
				return err
			}
			if list == nil {
				list = []api.Image{}
			}
			return s.render(list, func(w io.Writer) error {
				row(w, "ALIASES", "FINGERPRINT", "FORMAT", "SIZE", "MIN-MEMORY", "MIN-DISK", "KERNEL", "FILENAME", "CREATED")
				for _, im := range list {
					kernel := "no"
					if im.Kernel {
						kernel = "yes"
					}
					created := im.CreatedAt
					row(w, aliasNames(im), im.Fingerprint[:12], im.Format, sizeCell(im.Size), needCell(im, propMinMemory), needCell(im, propMinDisk), kernel, im.Filename, timeCell(&created))
				}
				return nil
			})
		},
	}
}

// The image properties that say what a guest of the image needs (the
// daemon holds launches to them: docs/guests.md).
const (
	propMinMemory = "requirements.memory"
	propMinDisk   = "requirements.disk"
)

// needCell is the image's property key, "-" when it has none.
func needCell(im api.Image, key string) string {
	if v := im.Properties[key]; v != "" {
		return v
	}
	return "-"
}

// sizeCell writes a byte count in MiB (or bytes below 1 MiB).
func sizeCell(n int64) string {
	if n < 1<<20 {
		return strconv.FormatInt(n, 10) + "B"
	}
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + "MiB"
}

func (s *session) imageInfoCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "info IMAGE",
		Short: "Show an image (by alias, fingerprint or fingerprint prefix)",
		Args:  argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			im, err := s.client.Image(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return s.render(im, func(w io.Writer) error {
				fmt.Fprintf(w, "Fingerprint: %s\nFilename: %s\nSize: %s (%d bytes)\nFormat: %s\n", im.Fingerprint, im.Filename, sizeCell(im.Size), im.Size, im.Format)
				fmt.Fprintf(w, "Kernel: %t\nInitrd: %t\nPublic: %t\nCreated: %s\n", im.Kernel, im.Initrd, im.Public, timeCell(&im.CreatedAt))
				fmt.Fprintf(w, "Minimum memory: %s\nMinimum disk: %s\n", needCell(*im, propMinMemory), needCell(*im, propMinDisk))
				fmt.Fprintln(w, "Aliases:")
				for _, a := range im.Aliases {
					fmt.Fprintf(w, "  - %s\n", a.Name)
				}
				fmt.Fprintln(w, "Properties:")
				for _, k := range slices.Sorted(maps.Keys(im.Properties)) {
					fmt.Fprintf(w, "  %s: %s\n", k, im.Properties[k])
				}
				return nil
			})
		},
	}
}

func (s *session) imageSetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "set IMAGE public=true|false",
		Short: "Change an image: public=true lets guests download it through devlxd",
		Long: `Change the image IMAGE (alias, fingerprint or fingerprint prefix). The only
key is public: public=true lets guests whose instance has
security.devlxd.images=true download the image through devlxd
(GET /1.0/images/{fingerprint}/export); public=false makes it private again,
and devlxd answers 404 Not Found for it, as LXD does for a private image.`,
		Args: argsExactly(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			kv, err := parseKeyValues(args[1:], "image setting")
			if err != nil {
				return err
			}
			var req api.ImagePatch
			for k, v := range kv {
				if k != "public" {
					return fmt.Errorf("invalid image setting %q: the only key is public", k)
				}
				b, err := strconv.ParseBool(v)
				if err != nil {
					return fmt.Errorf("invalid image setting public=%q: true or false", v)
				}
				req.Public = &b
			}
			im, err := s.client.UpdateImage(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			return s.render(im, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "Image %s: public=%t\n", im.Fingerprint, im.Public)
				return err
			})
		},
	}
}

func (s *session) imageDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete IMAGE...",
		Short: "Delete images (refused while an instance boots from one)",
		Args:  argsAtLeast(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return eachName(args, func(ref string) error { return s.client.DeleteImage(cmd.Context(), ref) })
		},
	}
}

func (s *session) imageAliasCreateCommand() *cobra.Command {
	var desc string
	cmd := &cobra.Command{
		Use:   "create NAME IMAGE",
		Short: "Name an image",
		Args:  argsExactly(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := s.client.CreateImageAlias(cmd.Context(), api.ImageAliasesPost{Name: args[0], Target: args[1], Description: desc})
			if err != nil {
				return err
			}
			return s.render(a, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "Alias %s names %s\n", a.Name, a.Target)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&desc, "description", "", "description of the alias")
	return cmd
}

func (s *session) imageAliasListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the image aliases",
		Args:  argsExactly(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := s.client.ImageAliases(cmd.Context())
			if err != nil {
				return err
			}
			if list == nil {
				list = []api.ImageAlias{}
			}
			return s.render(list, func(w io.Writer) error {
				row(w, "ALIAS", "FINGERPRINT", "DESCRIPTION")
				for _, a := range list {
					row(w, a.Name, a.Target[:12], a.Description)
				}
				return nil
			})
		},
	}
}

func (s *session) imageAliasDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME...",
		Short: "Delete image aliases (the images stay)",
		Args:  argsAtLeast(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return eachName(args, func(name string) error { return s.client.DeleteImageAlias(cmd.Context(), name) })
		},
	}
}
