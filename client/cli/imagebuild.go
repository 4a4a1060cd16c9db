package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
)

// imageRecipe is how the source tree builds one image: the make target and
// the build script (scripts/<script>.sh, asked --check first).
type imageRecipe struct {
	target string
	script string
}

// Images the CLI knows how to build (make <target>); their files are
// bin/images/<name>.img and <name>.json next to the CLI's own bin/. Both
// Debian images come from one script, parametrized by suite.
var buildableImages = map[string]imageRecipe{
	"debian-12": {target: "guest-image-debian", script: "guest-image-debian"},
	"debian-13": {target: "guest-image-debian-13", script: "guest-image-debian"},
}

// localImage returns the image file built for alias next to the CLI
// (bin/images/<alias>.img) and its recorded inputs, if there is one.
func localImage(alias string) (string, map[string]string, bool) {
	if _, ok := buildableImages[alias]; !ok {
		return "", nil, false
	}
	exe, err := os.Executable()
	if err != nil {
		return "", nil, false
	}
	dir := filepath.Join(filepath.Dir(exe), "images")
	img := filepath.Join(dir, alias+".img")
	if _, err := os.Stat(img); err != nil {
		return "", nil, false
	}
	props := map[string]string{}
	if data, err := os.ReadFile(filepath.Join(dir, alias+".json")); err == nil {
		_ = json.Unmarshal(data, &props) // a bad file only loses the properties
	}
	return img, props, true
}

// importLocal imports the locally built image for alias (see localImage),
// drawing the copy's progress on a terminal (watchImport).
func (s *session) importLocal(cmd *cobra.Command, alias string) (*api.Image, error) {
	img, props, ok := localImage(alias)
	if !ok {
		return nil, fmt.Errorf("no image %q is built here (make %s)", alias, buildableImages[alias].target)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "Importing %s as %s\n", img, alias)
	stop := watchImport(cmd.Context(), cmd.ErrOrStderr(), drawTransfers(cmd), img, s.client.ImageImports)
	defer stop()
	return s.client.ImportImage(cmd.Context(), api.ImagesPost{Path: img, Alias: alias, Properties: props})
}

// isNotFound reports whether err is the daemon's 404.
func isNotFound(err error) bool {
	var se *client.StatusError
	return errors.As(err, &se) && se.Code == 404
}

func (s *session) imageBuildCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "build NAME",
		Short: "Build a guest image (debian-12, debian-13) and import it under its name",
		Long: `Build a guest disk image and import it into the daemon's image store under
the alias NAME. debian-12 is built by "make guest-image-debian" and
debian-13 (trixie, whose systemd declares Ready by itself over vsock) by
"make guest-image-debian-13" in the source tree the CLI was built in
(mmdebstrap, as root; the image is cached outside the tree, see
docs/guests.md), then imported with its recorded
inputs as properties. The programs the build runs are checked first: one
that is missing is named with its Debian package ("make deps" installs
them all). An image already built for NAME is imported as is when the
build is not possible here.`,
		Args: argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			recipe, ok := buildableImages[args[0]]
			if !ok {
				return fmt.Errorf("unknown image %q: guestlink builds debian-12 and debian-13", args[0])
			}
			target := recipe.target
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			src := filepath.Dir(filepath.Dir(exe)) // <tree>/bin/guestlink
			build := true
			if _, err := os.Stat(filepath.Join(src, "Makefile")); err != nil {
				build = false
			} else if err := checkBuildTools(cmd, src, recipe.script); err != nil {
				if _, _, ok := localImage(args[0]); !ok {
					return fmt.Errorf("building %s: %w", args[0], err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "Not building %s (%v); importing the image built before\n", args[0], err)
				build = false
			}
			if !build {
				if _, _, ok := localImage(args[0]); !ok {
					return fmt.Errorf("building %s: no source tree at %s (the CLI builds images from the tree it was built in)", args[0], src)
				}
			}
			rep := s.reportBuild(cmd, args[0])
			im, err := s.buildAndImport(cmd, args[0], src, target, build, rep)
			rep.end(cmd.Context(), err)
			if err != nil {
				return err
			}
			return s.render(im, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "Image %s built and imported with fingerprint: %s\n", args[0], im.Fingerprint)
				return err
			})
		},
	}
}

// reportBuild registers the build of name with the daemon and returns its
// reporter, or nil (no reports) when the daemon does not take builds (an
// older daemon) or cannot be asked: the build goes on either way.
func (s *session) reportBuild(cmd *cobra.Command, name string) *buildReporter {
	b, err := s.client.StartImageBuild(cmd.Context(), name)
	if err != nil {
		return nil
	}
	return startBuildReporter(cmd.Context(), func(ctx context.Context, p api.ImageBuildPatch) error {
		_, err := s.client.ReportImageBuild(ctx, b.ID, p)
		return err
	})
}

// buildAndImport runs the build of name (make target in src, when build)
// and imports its image, telling rep each stage.
func (s *session) buildAndImport(cmd *cobra.Command, name, src, target string, build bool, rep *buildReporter) (*api.Image, error) {
	if build {
		if err := runBuild(cmd, src, target, rep); err != nil {
			return nil, fmt.Errorf("building %s (make %s): %w", name, target, err)
		}
	}
	rep.enter("import")
	if err := s.client.DeleteImageAlias(cmd.Context(), name); err != nil && !isNotFound(err) {
		return nil, err
	}
	im, err := s.importLocal(cmd, name)
	var se *client.StatusError
	if errors.As(err, &se) && se.Code == 409 { // same content stored already: name it
		_, err = s.client.CreateImageAlias(cmd.Context(), api.ImageAliasesPost{Name: name, Target: imageFingerprint(name)})
		if err == nil {
			im, err = s.client.Image(cmd.Context(), name)
		}
	}
	return im, err
}

// runBuild runs make TARGET in the source tree src, showing its stages
// (the build script's StageMarker lines) as progress on a terminal, and
// passing its output through otherwise.
func runBuild(cmd *cobra.Command, src, target string, rep *buildReporter) error {
	w := cmd.ErrOrStderr()
	st, err := newStages(w, isTerminal(w))
	if err != nil {
		return err
	}
	st.rep = rep
	mk := exec.CommandContext(cmd.Context(), "make", "-C", src, target)
	out, err := mk.StdoutPipe()
	if err != nil {
		return err
	}
	mk.Stderr = mk.Stdout
	st.enter("agent package (make packages)")
	if err := mk.Start(); err != nil {
		st.close(true)
		return err
	}
	readErr := st.run(out)
	err = errors.Join(mk.Wait(), readErr)
	st.close(err != nil)
	return err
}

// checkBuildTools asks the image's build script of the source tree src
// whether this host has the programs it runs (scripts/<script>.sh --check);
// the error names each missing one, its Debian package and make deps.
func checkBuildTools(cmd *cobra.Command, src, script string) error {
	var stderr bytes.Buffer
	check := exec.CommandContext(cmd.Context(), filepath.Join(src, "scripts", script+".sh"), "--check")
	check.Stderr = &stderr
	if err := check.Run(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return errors.New(msg)
		}
		return fmt.Errorf("checking the build's programs (scripts/%s.sh --check): %w", script, err)
	}
	return nil
}

// imageFingerprint returns the sha256 of the locally built image for alias.
func imageFingerprint(alias string) string {
	img, _, _ := localImage(alias)
	out, err := exec.Command("sha256sum", img).Output()
	if err != nil || len(out) < 64 {
		return ""
	}
	return string(out[:64])
}
