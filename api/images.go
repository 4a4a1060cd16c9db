package api

import "time"

// Image is an image of the host's image store, as GET /1.0/images/{fp}
// answers (LXD's image object, the fields guestlink has).
type Image struct {
	Fingerprint string            `json:"fingerprint"` // SHA-256 of the disk file, lowercase hex
	Filename    string            `json:"filename"`
	Size        int64             `json:"size"`
	Format      string            `json:"format"` // "raw" or "qcow2"
	Type        string            `json:"type"`   // "virtual-machine"
	Aliases     []ImageAlias      `json:"aliases"`
	Properties  map[string]string `json:"properties"`
	// Kernel and Initrd say whether the store holds a kernel (and initrd)
	// for direct boot taken from the image.
	Kernel bool `json:"kernel"`
	Initrd bool `json:"initrd"`
	// Public is true when guests may download the image through devlxd
	// (GET /1.0/images/{fp}/export with security.devlxd.images=true), as
	// LXD's public flag; images are private unless marked public.
	Public     bool      `json:"public"`
	CreatedAt  time.Time `json:"created_at"`
	UploadedAt time.Time `json:"uploaded_at"`
}

// ImageAlias is one alias of an image (in Image.Aliases: name and
// description; GET /1.0/images/aliases/{name} adds the target).
type ImageAlias struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Target      string `json:"target,omitempty"` // the image's fingerprint
}

// ImagesPost is the body of POST /1.0/images: import the image file at
// Path (a file on the daemon's machine, read and copied by the daemon, as
// POST /1.0/backends reads a plugin) under Alias. Kernel and Initrd are
// files for direct boot to use instead of those found in the image.
type ImagesPost struct {
	Path       string            `json:"path"`
	Alias      string            `json:"alias,omitempty"`
	Filename   string            `json:"filename,omitempty"`
	Properties map[string]string `json:"properties,omitempty"`
	Kernel     string            `json:"kernel,omitempty"`
	Initrd     string            `json:"initrd,omitempty"`
	// Public marks the new image public (guests may download it through
	// devlxd); false keeps it private.
	Public bool `json:"public,omitempty"`
}

// ImageImport is one import in progress, as GET /1.0/images/imports lists
// it: the file, the alias it gets, the data copied so far and to copy
// (bytes; holes are not copied) and when it started.
type ImageImport struct {
	Name      string    `json:"name"`
	Path      string    `json:"path"`
	Alias     string    `json:"alias,omitempty"`
	Done      int64     `json:"done"`
	Total     int64     `json:"total"`
	StartedAt time.Time `json:"started_at"`
}

// ImagePatch is the body of PATCH /1.0/images/{fp}: the fields to change
// (nil keeps one). Only the public flag can change.
type ImagePatch struct {
	Public *bool `json:"public,omitempty"`
}

// ImageAliasesPost is the body of POST /1.0/images/aliases.
type ImageAliasesPost struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Target      string `json:"target"` // fingerprint (or unique prefix, or another alias)
}

// ImageBuild is one image build a client runs and reports, as GET
// /1.0/images/builds lists it: the image it builds, its stage (Step from
// 1), the stage's bytes when it has them (Total 0: unknown) and their rate,
// its output lines, and for a failed build the error.
type ImageBuild struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Status    string    `json:"status"` // "running" or "failed"
	Stage     string    `json:"stage"`
	Step      int       `json:"step"`
	Done      int64     `json:"done"`
	Total     int64     `json:"total"`
	Rate      float64   `json:"rate"` // bytes per second over the stage
	Lines     int64     `json:"lines"`
	Error     string    `json:"error,omitempty"`
	StartedAt time.Time `json:"started_at"`
	// StageStartedAt is when the stage began, UpdatedAt the last report.
	StageStartedAt time.Time  `json:"stage_started_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	EndedAt        *time.Time `json:"ended_at,omitempty"`
}

// ImageBuildsPost is the body of POST /1.0/images/builds: register a
// build of the image Name (an alias), answered with the build and its id.
type ImageBuildsPost struct {
	Name string `json:"name"`
}

// ImageBuildPatch is the body of PATCH /1.0/images/builds/{id}: a report
// of the build's stage and progress, or its end (status "done", or
// "failed" with the error). A missing field keeps its value; a new stage
// starts its counts at 0.
type ImageBuildPatch struct {
	Stage  string `json:"stage,omitempty"`
	Done   *int64 `json:"done,omitempty"`
	Total  *int64 `json:"total,omitempty"`
	Lines  *int64 `json:"lines,omitempty"`
	Status string `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
}
