package web

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"path"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/agentmon"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/internal/hangup"
	"github.com/guestlink/guestlink/link/guestpath"
	"github.com/guestlink/guestlink/web/components"
)

// GuestFiles sends requests to the agents of running instances over their
// links (core/agentmon.Service): the dashboard's file download asks the
// agent's GET /1.0/files?path= through it. AgentDo returns the agent's
// answer, whose body the caller reads and closes; it fails with
// errdefs.ErrConflict when the instance has no connected agent.
type GuestFiles interface {
	AgentDo(uuid string, req *http.Request) (*http.Response, error)
}

var _ GuestFiles = (*agentmon.Service)(nil)

// maxAgentRefusal is how much of an agent's refusal is read.
const maxAgentRefusal = 64 << 10

// downloadFile answers GET /instances/{name}/files?path=PATH: the guest's
// regular file at PATH, streamed from its agent to the browser as an
// attachment named after the file. What cannot be downloaded (no such
// file, a directory, no connected agent, files switched off in the guest)
// is the instance page again with the reason beside the download form,
// with the status the API would answer.
func (d *Dashboard) downloadFile(c *fiber.Ctx) error {
	name := c.Params("name")
	p := c.Query("path")
	status, err := d.streamGuestFile(c, name, p)
	if err == nil {
		return nil
	}
	data, derr := d.instanceData(c, name)
	if derr != nil {
		return d.fail(c, derr)
	}
	data.Console = d.consoleView(c.UserContext(), name)
	data.Download.Path, data.Download.Err = p, d.errorText(c.Path(), err)
	return render(c, status, components.InstancePage(data))
}

// streamGuestFile streams the file or returns why not, with the status to
// answer.
func (d *Dashboard) streamGuestFile(c *fiber.Ctx, name, p string) (int, error) {
	fail := func(err error) (int, error) { return errdefs.HTTPStatus(err), err }
	if d.cfg.Files == nil {
		return fail(fmt.Errorf("this dashboard downloads no guest files: %w", errdefs.ErrNotSupported))
	}
	if p == "" {
		return fail(fmt.Errorf("give the absolute path of a file in the guest: %w", errdefs.ErrInvalid))
	}
	if _, err := guestpath.Clean(p); err != nil {
		return fail(fmt.Errorf("%w: %w", err, errdefs.ErrInvalid))
	}
	inst, err := d.cfg.Instances.Get(c.UserContext(), name)
	if err != nil {
		return fail(err)
	}
	by := requestor(c)
	ctx, stop := hangup.Context(c.UserContext(), c.Context().Conn())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "/1.0/files?path="+url.QueryEscape(p), nil)
	if err != nil {
		stop()
		return fail(fmt.Errorf("downloading %q from instance %q: %w", p, name, err))
	}
	resp, err := d.cfg.Files.AgentDo(inst.UUID, req)
	if err != nil {
		stop()
		d.log.Info("guest file download", "identity", by.Describe(), "instance", name, "path", p, "err", err)
		return fail(fmt.Errorf("downloading %q from instance %q: %w", p, name, err))
	}
	d.log.Info("guest file download", "identity", by.Describe(), "instance", name, "path", p, "status", resp.StatusCode, "type", resp.Header.Get("X-LXD-type"))
	if resp.StatusCode != http.StatusOK {
		defer stop()
		defer resp.Body.Close()
		return resp.StatusCode, agentRefusal(resp, p, name)
	}
	if typ := resp.Header.Get("X-LXD-type"); typ != "file" {
		stop()
		resp.Body.Close()
		what := map[string]string{"directory": "a directory", "symlink": "a symbolic link"}[typ]
		if what == "" {
			what = fmt.Sprintf("not a regular file (%q)", typ)
		}
		return http.StatusUnprocessableEntity, fmt.Errorf("%s in instance %q is %s: only a regular file can be downloaded: %w", p, name, what, errdefs.ErrInvalid)
	}
	base := path.Base(p)
	c.Set(fiber.HeaderContentType, fiber.MIMEOctetStream)
	c.Set(fiber.HeaderContentDisposition, mime.FormatMediaType("attachment", map[string]string{"filename": base}))
	c.Set(fiber.HeaderCacheControl, "no-store")
	size := -1
	if resp.ContentLength >= 0 {
		size = int(resp.ContentLength)
	}
	c.Context().SetBodyStream(&closeBoth{ReadCloser: resp.Body, stop: stop}, size)
	return http.StatusOK, nil
}

// downloadView is the download form of the instance page.
func (d *Dashboard) downloadView(name string) components.DownloadView {
	return components.DownloadView{Shown: d.cfg.Files != nil, Action: "/instances/" + name + "/files"}
}

// agentRefusal turns an agent's error answer (LXD's envelope) into an
// error of the matching kind, its message the agent's.
func agentRefusal(resp *http.Response, p, name string) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxAgentRefusal))
	var env api.Response[json.RawMessage]
	msg := resp.Status
	if json.Unmarshal(b, &env) == nil && env.Error != "" {
		msg = env.Error
	}
	kind := errdefs.ErrUnavailable
	switch resp.StatusCode {
	case http.StatusBadRequest:
		kind = errdefs.ErrInvalid
	case http.StatusNotFound:
		return fmt.Errorf("no file %s in instance %q: %w", p, name, errdefs.ErrNotFound)
	case http.StatusForbidden:
		kind = errdefs.ErrForbidden
	}
	return fmt.Errorf("downloading %s from instance %q: the guest's agent refused: %s: %w", p, name, msg, kind)
}

// closeBoth is an agent's answer body that also ends the request's
// hang-up watch when closed.
type closeBoth struct {
	io.ReadCloser
	stop func()
}

func (r *closeBoth) Close() error {
	err := r.ReadCloser.Close()
	r.stop()
	return err
}
