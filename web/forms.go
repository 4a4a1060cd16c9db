package web

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/images"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/web/components"
)

// Editor is what the dashboard's launch, delete and config forms need of
// the instance service (core/instance.Manager): the same calls the admin
// API makes, so the forms get the same validation and the same errors.
type Editor interface {
	Create(ctx context.Context, req instance.CreateRequest, by events.Requestor) (*instance.Instance, error)
	Delete(ctx context.Context, name string, force bool, by events.Requestor) error
	UpdateConfig(ctx context.Context, name string, set map[string]string, unset []string, by events.Requestor) (*instance.Instance, error)
}

var _ Editor = (*instance.Manager)(nil)

// registerForms adds the form routes (with Config.Editor).
func (d *Dashboard) registerForms(r fiber.Router, route func(fiber.Handler) []fiber.Handler) {
	if d.cfg.Editor == nil {
		return
	}
	r.Get("/launch", route(d.launchForm)...)
	r.Post("/launch", route(d.launch)...)
	r.Get("/instances/:name/delete", route(d.deleteForm)...)
	r.Post("/instances/:name/delete", route(d.deleteInstance)...)
	r.Post("/instances/:name/config", route(d.editConfig)...)
}

// ImageLister lists the image store's images (*images.Store).
type ImageLister interface {
	List(ctx context.Context) ([]*images.Image, error)
}

var _ ImageLister = (*images.Store)(nil)

// ProfileLister lists the profiles a launch may apply; the Editor
// (core/instance.Manager) is asked for it, as the admin API does.
type ProfileLister interface {
	Profiles(ctx context.Context) ([]*instance.Profile, error)
}

var _ ProfileLister = (*instance.Manager)(nil)

// profileChoices lists the profiles for the launch form: the default
// first, then the others by name (the order they apply in); nil when the
// daemon serves none.
func (d *Dashboard) profileChoices(ctx context.Context) []components.ProfileChoice {
	pl, ok := d.cfg.Editor.(ProfileLister)
	if !ok {
		return nil
	}
	list, err := pl.Profiles(ctx)
	if err != nil {
		d.log.Warn("listing profiles for the launch form", "error", err)
		return nil
	}
	out := make([]components.ProfileChoice, 0, len(list))
	for _, p := range list {
		out = append(out, components.ProfileChoice{Name: p.Name, Description: p.Description})
	}
	slices.SortStableFunc(out, func(a, b components.ProfileChoice) int {
		switch {
		case a.Name == instance.DefaultProfile:
			return -1
		case b.Name == instance.DefaultProfile:
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

func (d *Dashboard) launchData(c *fiber.Ctx) components.LaunchData {
	data := components.LaunchData{Meta: d.meta(c, "Launch an instance", "launch"), Errors: map[string]string{}}
	data.Profiles = d.profileChoices(c.UserContext())
	for _, b := range d.backends() {
		data.Backends = append(data.Backends, b.Name)
	}
	if d.cfg.Images != nil {
		list, err := d.cfg.Images.List(c.UserContext())
		if err != nil {
			// The form still works: the image field is then free text.
			d.log.Warn("listing images for the launch form", "error", err)
			return data
		}
		data.Images = imageChoices(list)
	}
	return data
}

// imageChoices labels images for the launch form: aliases (else the
// short fingerprint) first, then the short fingerprint and the memory the
// image needs.
func imageChoices(list []*images.Image) []components.ImageChoice {
	out := make([]components.ImageChoice, 0, len(list))
	for _, im := range list {
		short := im.Fingerprint
		if len(short) > 12 {
			short = short[:12]
		}
		ch := components.ImageChoice{Value: im.Fingerprint, Label: short}
		if len(im.Aliases) > 0 {
			ch.Value = im.Aliases[0]
			ch.Label = strings.Join(im.Aliases, ", ") + " (" + short + ")"
		}
		if m := im.Properties[instance.ImagePropMinMemory]; m != "" {
			ch.Label += ", needs " + m + " of memory"
		}
		if m := im.Properties[instance.ImagePropMinDisk]; m != "" {
			ch.Label += ", " + m + " of disk"
		}
		out = append(out, ch)
	}
	slices.SortFunc(out, func(a, b components.ImageChoice) int { return strings.Compare(a.Label, b.Label) })
	return out
}

func (d *Dashboard) launchForm(c *fiber.Ctx) error {
	data := d.launchData(c)
	switch {
	case slices.Contains(data.Backends, d.cfg.DefaultBackend):
		data.Backend = d.cfg.DefaultBackend
	case len(data.Backends) > 0:
		data.Backend = data.Backends[0]
	}
	for _, p := range data.Profiles {
		if p.Name == instance.DefaultProfile {
			data.Chosen = []string{instance.DefaultProfile}
		}
	}
	return render(c, http.StatusOK, components.LaunchPage(data))
}

// parseConfigLines reads "key=value" lines (blank lines ignored).
func parseConfigLines(text string) (map[string]string, error) {
	out := map[string]string{}
	for i, line := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("line %d %q: want key=value", i+1, line)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("line %d: key %q given twice", i+1, k)
		}
		out[k] = v
	}
	return out, nil
}

// launch answers POST /launch: it creates and starts an instance, then goes
// to its page (303); a refused request shows the form again (422) with
// each error next to its field.
func (d *Dashboard) launch(c *fiber.Ctx) error {
	data := d.launchData(c)
	data.Name = strings.TrimSpace(c.FormValue("name"))
	data.Backend = c.FormValue("backend")
	data.Image = strings.TrimSpace(c.FormValue("image"))
	data.Kernel = strings.TrimSpace(c.FormValue("kernel"))
	data.Initrd = strings.TrimSpace(c.FormValue("initrd"))
	data.Config = c.FormValue("config")
	// The profiles checked, in the form's order; with the field shown,
	// none checked is none (nil, the default profile, is for forms
	// without it).
	var profiles []string
	if c.FormValue("profiles_shown") != "" {
		profiles = []string{}
		posted := map[string]bool{}
		for _, v := range c.Context().PostArgs().PeekMulti("profile") {
			posted[string(v)] = true
		}
		for _, p := range data.Profiles {
			if posted[p.Name] {
				profiles = append(profiles, p.Name)
				delete(posted, p.Name)
			}
		}
		for _, n := range slices.Sorted(maps.Keys(posted)) {
			data.Errors["profiles"] = fmt.Sprintf("unknown profile %q", n)
		}
		data.Chosen = profiles
	}
	if err := instance.ValidateName(data.Name); err != nil {
		data.Errors["name"] = err.Error()
	}
	if !slices.Contains(data.Backends, data.Backend) {
		data.Errors["backend"] = fmt.Sprintf("unknown backend %q: loaded backends are %s", data.Backend, strings.Join(data.Backends, ", "))
	}
	cfg, err := parseConfigLines(data.Config)
	if err != nil {
		data.Errors["config"] = err.Error()
	}
	for field, key := range map[string]string{"kernel": "qemu.kernel", "initrd": "qemu.initrd"} {
		v := map[string]string{"kernel": data.Kernel, "initrd": data.Initrd}[field]
		if v == "" {
			continue
		}
		if _, ok := cfg[key]; ok {
			data.Errors[field] = fmt.Sprintf("%s is also given in the config keys: give it once", key)
		}
		if cfg != nil {
			cfg[key] = v
		}
	}
	if len(data.Errors) == 0 {
		_, err = d.cfg.Editor.Create(c.UserContext(), instance.CreateRequest{Name: data.Name, Backend: data.Backend, Image: data.Image, Config: cfg, Start: true, Profiles: profiles}, requestor(c))
		switch {
		case err == nil:
			return c.Redirect("/instances/"+url.PathEscape(strings.ToLower(data.Name)), http.StatusSeeOther)
		case errors.Is(err, errdefs.ErrAlreadyExists):
			data.Errors["name"] = err.Error()
		case data.Image != "" && (errors.As(err, new(*instance.ImageError)) || errors.Is(err, errdefs.ErrNotFound)):
			// The image is all the service looks up beyond what was
			// checked above (a member forwarding the launch keeps only
			// the class: not found); a backend without disk.v1 is an
			// image error too.
			data.Errors["image"] = err.Error()
		case errors.Is(err, errdefs.ErrInvalid) && len(cfg) > 0:
			// Config keys are what the service checks beyond the name
			// and the backend, which were checked above.
			data.Errors["config"] = err.Error()
		default:
			data.FormError = d.errorText(c.Path(), err)
		}
	}
	return render(c, http.StatusUnprocessableEntity, components.LaunchPage(data))
}

// deleteForm answers GET /instances/{name}/delete: the confirmation step,
// a page of its own so that it works without JavaScript.
func (d *Dashboard) deleteForm(c *fiber.Ctx) error {
	inst, err := d.cfg.Instances.Get(c.UserContext(), c.Params("name"))
	if err != nil {
		return d.fail(c, err)
	}
	w := instance.WireInstance(inst, nil)
	return render(c, http.StatusOK, components.DeletePage(components.DeleteData{Meta: d.meta(c, "Delete "+inst.Name, "instances"), Inst: &w}))
}

// deleteInstance answers POST /instances/{name}/delete: it deletes the
// instance (force: even if it runs) and shows the instances list with the
// outcome; a refusal shows the confirmation page again with the error.
func (d *Dashboard) deleteInstance(c *fiber.Ctx) error {
	name := c.Params("name")
	inst, err := d.cfg.Instances.Get(c.UserContext(), name)
	if err != nil {
		return d.fail(c, err)
	}
	if c.FormValue("confirm") != inst.Name {
		w := instance.WireInstance(inst, nil)
		return render(c, http.StatusUnprocessableEntity, components.DeletePage(components.DeleteData{Meta: d.meta(c, "Delete "+inst.Name, "instances"), Inst: &w,
			Error: fmt.Sprintf("type the instance's name, %s, to confirm", inst.Name)}))
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), d.cfg.ActionTimeout)
	defer cancel()
	if err := d.cfg.Editor.Delete(ctx, inst.Name, c.FormValue("force") == "on", requestor(c)); err != nil {
		w := instance.WireInstance(inst, nil)
		return render(c, http.StatusUnprocessableEntity, components.DeletePage(components.DeleteData{Meta: d.meta(c, "Delete "+inst.Name, "instances"), Inst: &w, Error: err.Error()}))
	}
	data, err := d.instancesData(c, components.Filter{Sort: "name", Page: 1})
	if err != nil {
		return d.fail(c, err)
	}
	data.Outcomes = []components.Outcome{{Name: inst.Name, Action: "delete"}}
	return render(c, http.StatusOK, components.InstancesPage(data))
}

// editConfig answers POST /instances/{name}/config: the guest config form
// (user.* and cloud-init.* keys: change or unset the existing ones, add
// one). The instance page comes back with the outcome, or with the
// error next to its field (422).
func (d *Dashboard) editConfig(c *fiber.Ctx) error {
	name := c.Params("name")
	inst, err := d.cfg.Instances.Get(c.UserContext(), name)
	if err != nil {
		return d.fail(c, err)
	}
	set := map[string]string{}
	var unset []string
	errs := map[string]string{}
	form := c.Request().PostArgs()
	unsetKeys := map[string]bool{}
	for _, v := range form.PeekMulti("unset") {
		unsetKeys[string(v)] = true
	}
	for _, kv := range components.GuestConfig(inst.Config) {
		k, old := kv[0], kv[1]
		switch {
		case unsetKeys[k]:
			unset = append(unset, k)
		case form.Has("set." + k):
			if v := strings.ReplaceAll(string(form.Peek("set."+k)), "\r\n", "\n"); v != old {
				set[k] = v
			}
		}
	}
	newKey := strings.TrimSpace(c.FormValue("new_key"))
	newValue := strings.ReplaceAll(c.FormValue("new_value"), "\r\n", "\n")
	switch {
	case newKey == "" && newValue != "":
		errs["new_key"] = "give the new key's name"
	case newKey == "":
	case !strings.HasPrefix(newKey, "user.") && !strings.HasPrefix(newKey, "cloud-init."):
		errs["new_key"] = fmt.Sprintf("key %q: the dashboard edits user.* and cloud-init.* keys only", newKey)
	case inst.Config[newKey] != "":
		errs["new_key"] = fmt.Sprintf("key %q exists: change it above", newKey)
	case newValue == "":
		errs["new_value"] = "give the new key's value"
	default:
		set[newKey] = newValue
	}
	if len(errs) == 0 && len(set) == 0 && len(unset) == 0 {
		errs["form"] = "nothing to change"
	}
	if len(errs) == 0 {
		if _, err := d.cfg.Editor.UpdateConfig(c.UserContext(), inst.Name, set, unset, requestor(c)); err != nil {
			if newKey != "" && errors.Is(err, errdefs.ErrInvalid) {
				errs["new_value"] = err.Error()
			} else {
				errs["form"] = err.Error()
			}
		}
	}
	data, err := d.instanceData(c, inst.Name)
	if err != nil {
		return d.fail(c, err)
	}
	data.Console = d.consoleView(c.UserContext(), data.Inst.Name)
	status := http.StatusOK
	if len(errs) > 0 {
		status = http.StatusUnprocessableEntity
		data.ConfigErrors = errs
		data.NewKey, data.NewValue = newKey, newValue
	} else {
		changed := slices.Concat(slices.Sorted(maps.Keys(set)), unset)
		data.Outcomes = []components.Outcome{{Name: inst.Name, Action: "config " + strings.Join(changed, ", ")}}
	}
	return render(c, status, components.InstancePage(data))
}
