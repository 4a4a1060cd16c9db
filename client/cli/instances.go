package cli

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/api/utf8check"
	"github.com/guestlink/guestlink/client"
)

// parseKeyValues parses "key=value" arguments (a value may contain "=" and
// may be empty; a key may not). An argument that is not valid UTF-8 is
// refused: encoding it as JSON would send U+FFFD instead.
func parseKeyValues(args []string, what string) (map[string]string, error) {
	out := make(map[string]string, len(args))
	for _, arg := range args {
		if err := utf8check.Value(arg); err != nil {
			return nil, fmt.Errorf("invalid %s %q: %w", what, arg, err)
		}
		k, v, ok := strings.Cut(arg, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("invalid %s %q: want key=value", what, arg)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("invalid %s: key %q given twice", what, k)
		}
		out[k] = v
	}
	return out, nil
}

func (s *session) launchCommand() *cobra.Command {
	var backend string
	var config []string
	var waitFor string
	var waitTimeout time.Duration
	var target string
	var profiles []string
	var noProfiles bool
	cmd := &cobra.Command{
		Use:   "launch [IMAGE] NAME [--backend BACKEND] [--target MEMBER] [-c key=value ...] [--wait ready [--timeout 2m]]",
		Short: "Create and start an instance",
		Long: `Create and start an instance called NAME. With IMAGE (an alias, fingerprint
or fingerprint prefix of the image store, see guestlink image list) the
guest boots from a writable layer on that image; the backend must announce
disk.v1 (qemu, qemu-legacy). -p PROFILE (repeatable) applies profiles in that
order under the -c keys; without -p the instance gets the default profile (a
root disk and a NIC eth0), with --no-profiles none (guestlink profile --help).
With --wait, then wait as guestlink wait does.

` + waitExitHelp,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return fmt.Errorf("%s takes 1 or 2 arguments, got %d (usage: %s)", cmd.CommandPath(), len(args), cmd.UseLine())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			image := ""
			if len(args) == 2 {
				image, args = args[0], args[1:]
			}
			cfg, err := parseKeyValues(config, "config")
			if err != nil {
				return err
			}
			if waitFor != "" {
				if err := checkWaitFor("--wait", waitFor); err != nil {
					return err
				}
			}
			req := api.InstancesPost{Name: args[0], Backend: backend, Config: cfg, Start: true, Image: image, Target: target}
			switch {
			case noProfiles && len(profiles) > 0:
				return fmt.Errorf("--no-profiles and -p cannot be given together")
			case noProfiles:
				req.Profiles = []string{} // none; nil is the default profile
			default:
				req.Profiles = profiles
			}
			inst, err := s.client.Create(cmd.Context(), req)
			if err != nil && image != "" && isNotFound(err) {
				// An image built here (make guest-image-debian) but not
				// imported yet: import it, then launch.
				if _, _, ok := localImage(image); ok {
					if _, ierr := s.importLocal(cmd, image); ierr != nil {
						return ierr
					}
					inst, err = s.client.Create(cmd.Context(), req)
				}
			}
			if err != nil {
				return err
			}
			if waitFor != "" {
				if s.format == FormatTable {
					fmt.Fprintf(s.out, "Instance %s launched on %s: %s\n", inst.Name, inst.Backend, inst.Status)
				}
				return s.waitFor(cmd, args, waitFor, waitTimeout)
			}
			return s.render(inst, func(w io.Writer) error {
				fmt.Fprintf(w, "Instance %s launched on %s: %s\n", inst.Name, inst.Backend, inst.Status)
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&backend, "backend", "b", "", "backend plugin (see guestlink backends; default: the daemon's)")
	cmd.Flags().StringArrayVarP(&config, "config", "c", nil, "config key=value (repeatable)")
	cmd.Flags().StringVar(&target, "target", "", "cluster member to run the instance on (default: the member with the fewest instances that has the backend)")
	cmd.Flags().StringArrayVarP(&profiles, "profile", "p", nil, "profile to apply, in order (repeatable; default: the default profile)")
	cmd.Flags().BoolVar(&noProfiles, "no-profiles", false, "apply no profile (not even the default one)")
	addWaitFlags(cmd, &waitFor, &waitTimeout, true)
	return cmd
}

// stateCommand builds start, stop and restart.
func (s *session) stateCommand(action, short string, stopFlags bool) *cobra.Command {
	var force bool
	var timeout time.Duration
	var stateful, stateless, all bool
	var waitFor string
	cmd := &cobra.Command{
		Use:   action + " NAME...",
		Short: short,
		Args:  argsAtLeast(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout < 0 {
				return fmt.Errorf("invalid --timeout %s: must not be negative", timeout)
			}
			if waitFor != "" {
				if err := checkWaitFor("--wait", waitFor); err != nil {
					return err
				}
			}
			req := api.InstanceStatePut{Action: action, Force: force, Timeout: int(math.Ceil(timeout.Seconds())),
				Stateful: stateful, Stateless: stateless}
			if action == api.ActionStart {
				req.Timeout = 0 // start's --timeout is the wait's
			}
			if all {
				return s.stopAll(cmd, req)
			}
			var states []*api.InstanceState
			err := eachName(args, func(name string) error {
				st, err := s.client.SetState(cmd.Context(), name, req)
				if err == nil {
					states = append(states, st)
				}
				return err
			})
			if waitFor != "" && err == nil {
				return s.waitFor(cmd, args, waitFor, timeout)
			}
			if s.format != FormatTable && len(states) > 0 {
				if rerr := s.render(states, nil); rerr != nil {
					return rerr
				}
			}
			return err
		},
	}
	switch action {
	case api.ActionStart:
		cmd.Flags().BoolVar(&stateless, "stateless", false, "boot afresh, discarding a state saved by stop --stateful")
		cmd.Use = action + " NAME... [--wait ready [--timeout 2m]]"
		cmd.Long = "Start instances; with --wait, then wait as guestlink wait does.\n\n" + waitExitHelp
		addWaitFlags(cmd, &waitFor, &timeout, true)
	case api.ActionStop:
		cmd.Use = action + " NAME... | --all"
		cmd.Args = func(cmd *cobra.Command, args []string) error {
			if all {
				if len(args) > 0 {
					return fmt.Errorf("%s --all takes no instance names, got %d (usage: %s)", cmd.CommandPath(), len(args), cmd.UseLine())
				}
				return nil
			}
			return argsAtLeast(1)(cmd, args)
		}
		cmd.Flags().BoolVar(&stateful, "stateful", false, "save the guest's state; the next start restores it (backends with the stateful capability)")
		cmd.Flags().BoolVar(&all, "all", false, "stop every running instance and report each")
	}
	if stopFlags {
		cmd.Flags().BoolVarP(&force, "force", "f", false, "stop at once, without a clean shutdown")
		cmd.Flags().DurationVar(&timeout, "timeout", 0, "how long a clean shutdown may take (e.g. 30s; 0: the backend's default)")
	}
	return cmd
}

func (s *session) startCommand() *cobra.Command {
	return s.stateCommand(api.ActionStart, "Start instances", false)
}

func (s *session) stopCommand() *cobra.Command {
	return s.stateCommand(api.ActionStop, "Stop instances", true)
}

// stopAll stops every running instance (Running or Ready) with req and
// reports each: a line per instance for people, the list of states with
// --format json|yaml. It goes on after a failure and returns the failures.
func (s *session) stopAll(cmd *cobra.Command, req api.InstanceStatePut) error {
	list, err := s.client.InstanceNames(cmd.Context(), client.InstanceFilter{Status: "Running"})
	if err != nil {
		return fmt.Errorf("listing running instances: %w", err)
	}
	states := []*api.InstanceState{}
	var lines []string
	err = eachName(list, func(name string) error {
		st, err := s.client.SetState(cmd.Context(), name, req)
		if err != nil {
			lines = append(lines, fmt.Sprintf("%s: not stopped: %v", name, err))
			return err
		}
		states = append(states, st)
		lines = append(lines, fmt.Sprintf("%s: %s", name, st.Status))
		return nil
	})
	if s.format != FormatTable {
		if rerr := s.render(states, nil); rerr != nil {
			return rerr
		}
		return err
	}
	if len(list) == 0 {
		lines = append(lines, "no running instances")
	}
	for _, l := range lines {
		if _, werr := fmt.Fprintln(s.out, l); werr != nil {
			return werr
		}
	}
	return err
}

func (s *session) restartCommand() *cobra.Command {
	return s.stateCommand(api.ActionRestart, "Restart instances", true)
}

func (s *session) deleteCommand() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "delete NAME...",
		Short: "Delete instances",
		Args:  argsAtLeast(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return eachName(args, func(name string) error {
				return s.client.Delete(cmd.Context(), name, force)
			})
		},
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "delete running instances too")
	return cmd
}

// listColumns are the instance object's keys the list table shows.
var listColumns = []string{"name", "status", "ipv4", "backend", "agent", "link", "boot", "started_at", "location"}

func (s *session) listCommand() *cobra.Command {
	var f client.InstanceFilter
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List instances",
		Args:  argsExactly(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The table asks for its columns only; json and yaml print
			// the full objects.
			var list []api.Instance
			var err error
			if s.format == FormatTable {
				list, err = s.client.InstanceSummaries(cmd.Context(), f, listColumns...)
			} else {
				list, err = s.client.Instances(cmd.Context(), f)
			}
			if err != nil {
				return err
			}
			if list == nil {
				list = []api.Instance{}
			}
			return s.render(list, func(w io.Writer) error {
				// A cluster's list says where each instance runs.
				clustered := slices.ContainsFunc(list, func(i api.Instance) bool { return i.Location != "" && i.Location != "none" })
				head := []string{"NAME", "STATUS", "IPV4", "BACKEND", "AGENT", "LINK", "BOOT", "STARTED"}
				if clustered {
					head = append(head, "LOCATION")
				}
				row(w, head...)
				for _, i := range list {
					cells := []string{i.Name, i.Status, i.IPv4, i.Backend, string(i.Agent.State), i.Link, strconv.FormatInt(i.Boot, 10), timeCell(i.StartedAt)}
					if clustered {
						cells = append(cells, i.Location)
					}
					row(w, cells...)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&f.Status, "status", "", "only instances with this status (Running includes Ready)")
	cmd.Flags().StringVar(&f.Backend, "backend", "", "only instances of this backend")
	cmd.Flags().StringVar(&f.Agent, "agent", "", "only instances whose agent is in this state")
	return cmd
}

func (s *session) infoCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "info NAME",
		Short: "Show an instance, its agent and its timeline",
		Args:  argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			inst, err := s.client.Instance(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if inst.Timeline == nil {
				inst.Timeline = []api.TimelineEntry{}
			}
			if inst.Agent.State == api.AgentConnected {
				// The agent's fresh report (the instance carries the
				// cached one).
				if st, err := s.client.State(cmd.Context(), args[0]); err == nil && st.Guest != nil {
					inst.Guest = st.Guest
				}
			}
			return s.render(inst, func(w io.Writer) error {
				writeInfo(w, inst)
				return nil
			})
		},
	}
}

// writeInfo prints an instance for people.
func writeInfo(w io.Writer, inst *api.Instance) {
	row(w, "Name:", inst.Name)
	row(w, "UUID:", inst.UUID)
	row(w, "Backend:", inst.Backend)
	row(w, "Status:", fmt.Sprintf("%s (%d)", inst.Status, inst.StatusCode))
	if inst.StatusReason != "" {
		row(w, "Status reason:", inst.StatusReason)
	}
	if inst.Location != "" && inst.Location != "none" {
		row(w, "Location:", inst.Location)
	}
	if len(inst.Profiles) > 0 {
		row(w, "Profiles:", strings.Join(inst.Profiles, ", "))
	}
	row(w, "Created:", timeCell(&inst.CreatedAt))
	row(w, "Started:", timeCell(inst.StartedAt))
	row(w, "Ready since:", timeCell(inst.ReadyAt))
	row(w, "Boot:", strconv.FormatInt(inst.Boot, 10))
	row(w, "Link:", inst.Link)
	agent := string(inst.Agent.State)
	if agent == "" {
		agent = "none"
	}
	if hb := timeCell(inst.Agent.LastHeartbeat); hb != "" {
		agent += ", last heartbeat " + hb
	}
	row(w, "Agent:", agent)
	writeGuest(w, inst.Guest)
	if len(inst.Conditions) > 0 {
		fmt.Fprintln(w, "Conditions:")
		writeConditions(w, "  ", inst.Conditions)
	}
	if inst.DevlxdSocket != "" {
		row(w, "Devlxd socket:", inst.DevlxdSocket)
	}
	fmt.Fprintln(w, "Config:")
	for _, k := range slices.Sorted(maps.Keys(inst.Config)) {
		row(w, "  "+k+":", inst.Config[k])
	}
	if len(inst.Devices) > 0 {
		fmt.Fprintln(w, "Devices:")
		for _, d := range slices.Sorted(maps.Keys(inst.Devices)) {
			var props []string
			for _, k := range slices.Sorted(maps.Keys(inst.Devices[d])) {
				props = append(props, k+"="+inst.Devices[d][k])
			}
			row(w, "  "+d+":", strings.Join(props, " "))
		}
	}
	fmt.Fprintln(w, "Timeline:")
	if len(inst.Timeline) == 0 {
		fmt.Fprintln(w, "  (empty)")
		return
	}
	row(w, "  TIME", "BOOT", "KIND", "FROM", "TO", "CAUSE", "DETAIL")
	for _, e := range inst.Timeline {
		row(w, "  "+e.Time.Local().Format("2006-01-02 15:04:05.000"), strconv.FormatInt(e.Boot, 10), e.Kind, e.From, e.To, e.Cause, e.Detail)
	}
}

// writeGuest prints what the agent reports of the guest: its features, OS,
// host name, kernel and addresses.
func writeGuest(w io.Writer, g *api.GuestInfo) {
	if g == nil {
		return
	}
	features := strings.Join(g.Features, ", ")
	if features == "" {
		features = "none"
	}
	row(w, "Agent features:", features)
	if g.Error != "" {
		row(w, "Guest state:", g.Error)
	}
	st := g.State
	if st == nil {
		return
	}
	osName := strings.TrimSpace(st.OS + " " + st.OSVersion)
	row(w, "OS:", osName)
	row(w, "Hostname:", st.Hostname)
	row(w, "Kernel:", st.Kernel)
	row(w, "Processes:", strconv.FormatInt(st.Processes, 10))
	if st.Memory.Total > 0 {
		row(w, "Memory:", fmt.Sprintf("%d MiB used of %d MiB", st.Memory.Usage>>20, st.Memory.Total>>20))
	}
	fmt.Fprintln(w, "Network:")
	for _, name := range slices.Sorted(maps.Keys(st.Network)) {
		n := st.Network[name]
		desc := n.State
		if n.Hwaddr != "" {
			desc += ", " + n.Hwaddr
		}
		row(w, "  "+name+":", fmt.Sprintf("%s, mtu %d", desc, n.MTU))
		for _, a := range n.Addresses {
			row(w, "    "+a.Family+":", fmt.Sprintf("%s/%s (%s)", a.Address, a.Netmask, a.Scope))
		}
	}
}
