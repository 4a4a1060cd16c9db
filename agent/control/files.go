package control

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"

	"github.com/guestlink/guestlink/agent/features"
	"github.com/guestlink/guestlink/agent/files"
	"github.com/guestlink/guestlink/api"
)

// LXD's file headers (GET answers them, POST reads them).
const (
	HeaderUID   = "X-LXD-uid"
	HeaderGID   = "X-LXD-gid"
	HeaderMode  = "X-LXD-mode"
	HeaderType  = "X-LXD-type"
	HeaderWrite = "X-LXD-write"
)

// FeatureSwitch says whether the guest's admin lets a feature through
// (*features.Switch): Check returns an error wrapping
// features.ErrDisabled, naming the switch, for a feature that is off.
type FeatureSwitch interface {
	Check(name string) error
}

// feature answers 403 and reports false when the feature is off.
func (h *Handler) feature(w http.ResponseWriter, name string) bool {
	if h.Features == nil {
		return true
	}
	if err := h.Features.Check(name); err != nil {
		writeError(w, http.StatusForbidden, err.Error())
		return false
	}
	return true
}

// fileStatus maps a files error to the status LXD answers.
func fileStatus(err error) int {
	switch {
	case errors.Is(err, files.ErrBadPath):
		return http.StatusBadRequest
	case errors.Is(err, files.ErrEscapes), errors.Is(err, fs.ErrPermission):
		return http.StatusForbidden
	case errors.Is(err, fs.ErrNotExist):
		return http.StatusNotFound
	case errors.Is(err, fs.ErrExist):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

// serveFiles serves GET, POST and DELETE /1.0/files?path=PATH as LXD's agent
// does: GET answers a file's bytes, a directory's entry names (sync
// envelope) or a symlink's target, with the X-LXD-uid, -gid, -mode and
// -type headers; POST writes what the headers say from the body; DELETE
// removes.
func (h *Handler) serveFiles(w http.ResponseWriter, r *http.Request) {
	if !h.feature(w, features.Files) {
		return
	}
	if h.Files == nil {
		writeError(w, http.StatusNotImplemented, "this agent serves no files")
		return
	}
	q := r.URL.Query()
	if _, ok := q["path"]; !ok {
		writeError(w, http.StatusBadRequest, "missing path: give ?path=ABSOLUTE_PATH_IN_THE_GUEST")
		return
	}
	p := q.Get("path")
	switch r.Method {
	case http.MethodGet:
		h.getFile(w, p)
	case http.MethodPost:
		h.postFile(w, r, p)
	case http.MethodDelete:
		if err := h.Files.Delete(p); err != nil {
			writeError(w, fileStatus(err), err.Error())
			return
		}
		writeSync(w, nil)
	default:
		writeError(w, http.StatusMethodNotAllowed, "")
	}
}

func (h *Handler) getFile(w http.ResponseWriter, p string) {
	e, err := h.Files.Get(p)
	if err != nil {
		writeError(w, fileStatus(err), err.Error())
		return
	}
	hd := w.Header()
	hd.Set(HeaderUID, strconv.Itoa(e.UID))
	hd.Set(HeaderGID, strconv.Itoa(e.GID))
	hd.Set(HeaderMode, api.FormatFileMode(e.Mode))
	hd.Set(HeaderType, e.Type)
	switch e.Type {
	case files.TypeDirectory:
		writeSync(w, e.Entries)
	case files.TypeSymlink:
		hd.Set("Content-Type", "application/octet-stream")
		hd.Set("Content-Length", strconv.Itoa(len(e.Target)))
		_, _ = io.WriteString(w, e.Target)
	default:
		defer e.File.Close()
		hd.Set("Content-Type", "application/octet-stream")
		hd.Set("Content-Length", strconv.FormatInt(e.Size, 10))
		_, _ = io.Copy(w, io.LimitReader(e.File, e.Size))
	}
}

// ParseWriteHeaders reads a POST's X-LXD-uid, -gid (-1 or absent: left as
// is), -mode (octal, up to 07777), -type and -write (overwrite or append).
func ParseWriteHeaders(h http.Header) (files.WriteOptions, error) {
	opts := files.WriteOptions{UID: -1, GID: -1, Type: h.Get(HeaderType)}
	for _, id := range []struct {
		name string
		dst  *int
	}{{HeaderUID, &opts.UID}, {HeaderGID, &opts.GID}} {
		v := h.Get(id.name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < -1 {
			return opts, fmt.Errorf("%w: %s %q: want -1 or a non-negative id", files.ErrBadPath, id.name, v)
		}
		*id.dst = int(n)
	}
	if v := h.Get(HeaderMode); v != "" {
		m, err := api.ParseFileMode(v)
		if err != nil {
			return opts, fmt.Errorf("%w: %s: %w", files.ErrBadPath, HeaderMode, err)
		}
		opts.Mode = &m
	}
	switch v := h.Get(HeaderWrite); v {
	case "", "overwrite":
	case "append":
		opts.Append = true
	default:
		return opts, fmt.Errorf("%w: %s %q: want overwrite or append", files.ErrBadPath, HeaderWrite, v)
	}
	return opts, nil
}

func (h *Handler) postFile(w http.ResponseWriter, r *http.Request, p string) {
	opts, err := ParseWriteHeaders(r.Header)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := h.Files.Write(p, r.Body, opts); err != nil {
		writeError(w, fileStatus(err), err.Error())
		return
	}
	writeSync(w, nil)
}
