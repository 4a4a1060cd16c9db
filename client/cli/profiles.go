package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/guestlink/guestlink/api"
)

// profileCommand is "guestlink profile": LXD's profiles.
func (s *session) profileCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "profile",
		Short: "Manage profiles (config and devices applied to instances before their own)",
		Long: `Profiles hold config keys and devices that instances apply in order before
their own keys, as LXD's: later profiles win, the instance's own keys win over
all, a device of the same name is replaced whole. New instances get the
"default" profile (a root disk and a user-mode NIC eth0) unless launch names
others with -p or --no-profiles.`,
		RunE: func(_ *cobra.Command, args []string) error {
			return subcommandError("profile", args, "create, list, show, edit, rename, delete or assign")
		},
	}
	cmd.AddCommand(s.profileCreateCommand(), s.profileListCommand(), s.profileShowCommand(), s.profileEditCommand(),
		s.profileRenameCommand(), s.profileDeleteCommand(), s.profileAssignCommand())
	return cmd
}

func (s *session) profileCreateCommand() *cobra.Command {
	var description string
	cmd := &cobra.Command{
		Use:   "create PROFILE [--description TEXT] [< profile.yaml]",
		Short: "Create a profile (empty, or from YAML on stdin as profile show prints it)",
		Args:  argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.ProfilesPost{Name: args[0]}
			if !interactive(cmd) {
				raw, err := io.ReadAll(cmd.InOrStdin())
				if err != nil {
					return fmt.Errorf("reading the profile from stdin: %w", err)
				}
				if len(bytes.TrimSpace(raw)) > 0 {
					put, err := parseProfileYAML(raw)
					if err != nil {
						return err
					}
					req.ProfilePut = put
				}
			}
			if description != "" {
				req.Description = description
			}
			p, err := s.client.CreateProfile(cmd.Context(), req)
			if err != nil {
				return err
			}
			return s.render(p, func(w io.Writer) error {
				fmt.Fprintf(w, "Profile %s created\n", p.Name)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&description, "description", "", "the profile's description")
	return cmd
}

func (s *session) profileListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List profiles",
		Args:  argsExactly(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := s.client.Profiles(cmd.Context())
			if err != nil {
				return err
			}
			if list == nil {
				list = []api.Profile{}
			}
			return s.render(list, func(w io.Writer) error {
				row(w, "NAME", "DESCRIPTION", "USED BY")
				for _, p := range list {
					row(w, p.Name, p.Description, fmt.Sprint(len(p.UsedBy)))
				}
				return nil
			})
		},
	}
}

func (s *session) profileShowCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "show PROFILE",
		Short: "Show a profile as YAML (what profile edit reads)",
		Args:  argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := s.client.Profile(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return s.render(p, func(w io.Writer) error { return writeYAML(w, p) })
		},
	}
}

// parseProfileYAML reads a profile's writable part from YAML, refusing
// unknown fields (name and used_by, which profile show prints, are
// accepted and ignored).
func parseProfileYAML(raw []byte) (api.ProfilePut, error) {
	var doc struct {
		api.ProfilePut `yaml:",inline"`
		Name           string   `yaml:"name"`
		UsedBy         []string `yaml:"used_by"`
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return api.ProfilePut{}, fmt.Errorf("no profile given: write it as YAML, as profile show prints it (on stdin, or in the editor)")
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return api.ProfilePut{}, fmt.Errorf("reading the profile's YAML: %w", err)
	}
	return doc.ProfilePut, nil
}

func (s *session) profileEditCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "edit PROFILE [< profile.yaml]",
		Short: "Edit a profile's description, config and devices as YAML ($EDITOR on a terminal, else stdin)",
		Long: `Edit a profile as YAML. On a terminal the profile opens in $VISUAL or $EDITOR
(vi without either); otherwise the whole profile is read from stdin, as
lxc profile edit NAME < profile.yaml. The YAML replaces the profile's
description, config and devices.`,
		Args: argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var raw []byte
			var err error
			if interactive(cmd) {
				raw, err = s.editProfileInEditor(cmd, args[0])
			} else {
				raw, err = io.ReadAll(cmd.InOrStdin())
			}
			if err != nil {
				return err
			}
			put, err := parseProfileYAML(raw)
			if err != nil {
				return err
			}
			if put.Config == nil {
				put.Config = map[string]string{}
			}
			if put.Devices == nil {
				put.Devices = map[string]map[string]string{}
			}
			p, err := s.client.UpdateProfile(cmd.Context(), args[0], put)
			if err != nil {
				return err
			}
			return s.render(p, func(w io.Writer) error {
				fmt.Fprintf(w, "Profile %s updated\n", p.Name)
				return nil
			})
		},
	}
}

// editProfileInEditor writes the profile to a private temporary file,
// runs the user's editor on it and returns what it then holds.
func (s *session) editProfileInEditor(cmd *cobra.Command, name string) ([]byte, error) {
	p, err := s.client.Profile(cmd.Context(), name)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := writeYAML(&buf, p.ProfilePut); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "guestlink-profile-")
	if err != nil {
		return nil, fmt.Errorf("editing profile %q: %w", name, err)
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		return nil, fmt.Errorf("editing profile %q: %w", name, err)
	}
	editor := os.Getenv("VISUAL")
	if editor == "" {
		editor = os.Getenv("EDITOR")
	}
	if editor == "" {
		editor = "vi"
	}
	fields := strings.Fields(editor)
	ed := exec.CommandContext(cmd.Context(), fields[0], append(fields[1:], file)...)
	ed.Stdin, ed.Stdout, ed.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := ed.Run(); err != nil {
		return nil, fmt.Errorf("editing profile %q: editor %q: %w", name, editor, err)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("editing profile %q: %w", name, err)
	}
	return raw, nil
}

func (s *session) profileRenameCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "rename PROFILE NEW-NAME",
		Short: "Rename a profile (instances using it follow; not the default profile)",
		Args:  argsExactly(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := s.client.RenameProfile(cmd.Context(), args[0], args[1]); err != nil {
				return err
			}
			if s.format == FormatTable {
				fmt.Fprintf(s.out, "Profile %s renamed to %s\n", args[0], args[1])
			}
			return nil
		},
	}
}

func (s *session) profileDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete PROFILE",
		Short: "Delete a profile no instance uses (not the default profile)",
		Args:  argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := s.client.DeleteProfile(cmd.Context(), args[0]); err != nil {
				return err
			}
			if s.format == FormatTable {
				fmt.Fprintf(s.out, "Profile %s deleted\n", args[0])
			}
			return nil
		},
	}
}

func (s *session) profileAssignCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "assign INSTANCE PROFILES",
		Short: `Set an instance's profiles: a comma-separated list in order ("" for none); applied at its next start`,
		Args:  argsExactly(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			profiles := []string{}
			if args[1] != "" {
				profiles = strings.Split(args[1], ",")
			}
			inst, err := s.client.AssignProfiles(cmd.Context(), args[0], profiles)
			if err != nil {
				return err
			}
			return s.render(inst, func(w io.Writer) error {
				fmt.Fprintf(w, "Profiles %s applied to %s\n", strings.Join(inst.Profiles, ","), inst.Name)
				return nil
			})
		},
	}
}
