package components

import (
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/web/ansi"
)

// Meta is what every page needs: its title, the active navigation entry, the
// CSRF token for forms and the last event id the page reflects (the live
// stream resumes after it).
type Meta struct {
	Title  string
	Active string // "overview" or "instances"
	CSRF   string
	// Who is the signed-in session ("session/abcd1234"); empty when the
	// dashboard has no login, and then no "Log out" control is shown.
	Who         string
	LastEventID int64
	// Stream is the query of the page's live stream beside since=: what
	// the page shows (view=overview, view=instances&rows=…,
	// view=instance&name=…, view=none).
	Stream string
	Now    time.Time
	// HeartbeatMS is the live stream's heartbeat period; the page treats a
	// stream silent for 2.5 periods as dead.
	HeartbeatMS int64
	// CanLaunch shows the Launch entry (the dashboard has the forms).
	CanLaunch bool
	// HasImages shows the Images entry (the dashboard has an image store).
	HasImages bool
}

// Count is one tile of the overview.
type Count struct {
	Label string
	N     int
	Tone  Tone
	Href  string
}

// BackendView is one backend plugin as the dashboard shows it.
type BackendView struct {
	Name      string
	Version   string
	Health    string
	Restarts  int
	LastError string
}

// Activity is one recent event as the dashboard shows it.
type Activity struct {
	ID       int64
	Time     time.Time
	Instance string
	Action   string
	Who      string
}

// OverviewData is the overview page's data.
type OverviewData struct {
	Meta
	Total    int
	ByStatus []Count
	ByAgent  []Count
	Backends []BackendView
	Recent   []Activity
	Fleet    Fleet
}

// Filter is the instances table's filter and sort, as in the query string.
type Filter struct {
	Status  string
	Agent   string
	Backend string
	Query   string
	Sort    string
	Page    int
}

// Outcome is the result of one action on one instance (bulk actions show one
// per instance).
type Outcome struct {
	Name   string
	Action string
	Err    string
}

// InstancesData is the instances page's data.
type InstancesData struct {
	Meta
	Rows     []*api.Instance
	Filter   Filter
	Total    int // matching instances, all pages
	Pages    int
	Backends []string
	Outcomes []Outcome
}

// LoginData is the login page's data.
type LoginData struct {
	// Notice is an informational line (signed out, session ended).
	Notice string
	// Error says why a login link did not work.
	Error string
	// Confirm is the token of a login link another site sent the browser
	// to: the page asks for a click before redeeming it.
	Confirm string
}

// TimelineItem is one timeline entry as the dashboard shows it.
type TimelineItem struct {
	Time   time.Time
	Boot   int64
	Kind   string
	From   string
	To     string
	Cause  string
	Detail string
}

// InstanceData is the instance page's data.
type InstanceData struct {
	Meta
	Inst     *api.Instance
	Timeline []TimelineItem // newest first
	Outcomes []Outcome
	// Snapshots are the instance's snapshots, oldest first (SnapshotList).
	Snapshots []api.InstanceSnapshot
	Console   ConsoleView
	Chart     BootChart
	// ConfigErrors are the config form's errors by field ("new_key",
	// "new_value", "form"); NewKey and NewValue what was typed.
	ConfigErrors     map[string]string
	NewKey, NewValue string
	// Editable shows the config form and the delete link.
	Editable bool
	// Terminal is the terminal panel; Download the file download form.
	Terminal TerminalView
	Download DownloadView
}

// TerminalView is the terminal panel of the instance page: a button that
// opens a shell in the guest (terminal.js, xterm.js over the exec
// websockets) when the agent is connected, else why not.
type TerminalView struct {
	// Shown is false when the dashboard opens no terminals: no panel.
	Shown bool
	// Available shows the open button; Reason says why it is not.
	Available bool
	Reason    string
	// Open is where the page posts to open one.
	Open string
}

// DownloadView is the instance page's form that downloads a guest file:
// Path is what was asked, Err why it could not be downloaded.
type DownloadView struct {
	// Shown is false when the dashboard downloads no guest files.
	Shown  bool
	Action string
	Path   string
	Err    string
}

// LaunchData is the launch form: what was typed, and the errors by field
// ("name", "backend", "image", "kernel", "initrd", "config") or for the whole form.
type LaunchData struct {
	Meta
	Backends                                     []string
	Name, Backend, Image, Kernel, Initrd, Config string
	// Images are the store's images to choose from; nil (no image store)
	// shows a text field instead.
	Images    []ImageChoice
	Errors    map[string]string
	FormError string
	// Profiles are the profiles to choose from, in the order they apply
	// (nil: the daemon serves none, the field is not shown); Chosen are
	// the checked ones (the default profile on a new form).
	Profiles []ProfileChoice
	Chosen   []string
}

// ProfileChoice is one profile of the launch form.
type ProfileChoice struct {
	Name, Description string
}

// ProfileChosen reports whether the profile name is checked.
func (d LaunchData) ProfileChosen(name string) bool {
	for _, c := range d.Chosen {
		if c == name {
			return true
		}
	}
	return false
}

// ImageChoice is one image of the launch form's list.
type ImageChoice struct {
	Value string // what the form posts: an alias, else the fingerprint
	Label string // aliases, short fingerprint and what the image needs
}

// AdvancedOpen reports whether the launch form's advanced part (host
// paths) starts open: when it holds a value or an error.
func (d LaunchData) AdvancedOpen() bool {
	return d.Kernel != "" || d.Initrd != "" || d.Errors["kernel"] != "" || d.Errors["initrd"] != ""
}

// ImageListed reports whether the chosen image is one of the list's (a
// value posted from elsewhere is kept as an extra choice).
func (d LaunchData) ImageListed() bool {
	for _, im := range d.Images {
		if im.Value == d.Image {
			return true
		}
	}
	return d.Image == ""
}

// DeleteData is the delete confirmation page.
type DeleteData struct {
	Meta
	Inst  *api.Instance
	Error string
}

// ConsoleView is the console panel of the instance page: the tail of the
// log as text segments (never markup), where the live stream resumes, and
// the links of the stream and the download.
type ConsoleView struct {
	// Available is false when the log cannot be read; Err says why.
	Available bool
	Err       string
	Segments  []ansi.Segment
	// Offset is the log offset after the segments: the stream starts there.
	Offset int64
	// Skipped is how many bytes of the log precede the segments.
	Skipped    int64
	Stream     string
	Download   string
	Scrollback int
}
