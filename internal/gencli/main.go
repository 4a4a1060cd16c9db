// Command gencli writes the guestlink CLI's shell completions (bash, zsh,
// fish) and man pages, generated from its cobra commands, for the host
// package: go run ./internal/gencli -out DIR writes DIR/completion/ and
// DIR/man/.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra/doc"

	"github.com/guestlink/guestlink/client/cli"
)

func main() {
	out := flag.String("out", "bin/cli-docs", "output directory")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintf(os.Stderr, "gencli: %v\n", err)
		os.Exit(1)
	}
}

func run(out string) error {
	comp, man := filepath.Join(out, "completion"), filepath.Join(out, "man")
	for _, d := range []string{comp, man} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	root := cli.NewRootCommand()
	root.DisableAutoGenTag = true // reproducible output
	if err := root.GenBashCompletionFileV2(filepath.Join(comp, "guestlink.bash"), true); err != nil {
		return fmt.Errorf("bash completion: %w", err)
	}
	if err := root.GenZshCompletionFile(filepath.Join(comp, "_guestlink")); err != nil {
		return fmt.Errorf("zsh completion: %w", err)
	}
	if err := root.GenFishCompletionFile(filepath.Join(comp, "guestlink.fish"), true); err != nil {
		return fmt.Errorf("fish completion: %w", err)
	}
	header := &doc.GenManHeader{Title: "GUESTLINK", Section: "1", Source: "guestlink", Manual: "guestlink manual"}
	if err := doc.GenManTree(root, header, man); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	return nil
}
