package web

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/errdefs"
)

// fakeEditor records the service calls of the forms and answers with the
// errors the real service gives for what it refuses.
type fakeEditor struct {
	inst  *fakeInstances
	mu    sync.Mutex
	calls []string
}

func (f *fakeEditor) record(s string) {
	f.mu.Lock()
	f.calls = append(f.calls, s)
	f.mu.Unlock()
	// The instance service's record of what ran, which the access tests
	// check.
	f.inst.mu.Lock()
	f.inst.actions = append(f.inst.actions, s)
	f.inst.mu.Unlock()
}

func (f *fakeEditor) Create(_ context.Context, req instance.CreateRequest, _ events.Requestor) (*instance.Instance, error) {
	call := fmt.Sprintf("create %s %s %v start=%v", req.Name, req.Backend, req.Config, req.Start)
	if req.Image != "" {
		call += " image=" + req.Image
	}
	f.record(call)
	switch {
	case req.Image == "missing":
		return nil, fmt.Errorf("creating instance %q: image %q: %w", req.Name, req.Image, errdefs.ErrNotFound)
	case req.Image != "" && req.Backend == "sim":
		return nil, fmt.Errorf("creating instance %q: %w", req.Name, &instance.ImageError{Err: fmt.Errorf("backend %q cannot boot from an image (it does not announce disk.v1): %w", req.Backend, errdefs.ErrInvalid)})
	}
	if _, err := f.inst.Get(context.Background(), req.Name); err == nil {
		return nil, fmt.Errorf("creating instance %q: %w", req.Name, errdefs.ErrAlreadyExists)
	}
	for k := range req.Config {
		if !strings.HasPrefix(k, "user.") && !strings.HasPrefix(k, "sim.") && !strings.HasPrefix(k, "qemu.") {
			return nil, fmt.Errorf("creating instance %q: unknown configuration key %q: %w", req.Name, k, errdefs.ErrInvalid)
		}
	}
	i := running(req.Name, instance.AgentNone)
	f.inst.put(i)
	return i, nil
}

func (f *fakeEditor) Delete(_ context.Context, name string, force bool, _ events.Requestor) error {
	f.record(fmt.Sprintf("delete %s force=%v", name, force))
	i, err := f.inst.Get(context.Background(), name)
	if err != nil {
		return err
	}
	if i.Status == "Running" && !force {
		return fmt.Errorf("deleting instance %q: it runs, stop it first: %w", name, errdefs.ErrConflict)
	}
	return nil
}

func (f *fakeEditor) UpdateConfig(_ context.Context, name string, set map[string]string, unset []string, _ events.Requestor) (*instance.Instance, error) {
	keys := slices.Sorted(maps.Keys(set))
	f.record(fmt.Sprintf("config %s set=%v unset=%v", name, keys, unset))
	if v, ok := set["user.bad"]; ok {
		return nil, fmt.Errorf("updating instance %q: invalid value %q: %w", name, v, errdefs.ErrInvalid)
	}
	return f.inst.Get(context.Background(), name)
}

func (f *fakeEditor) last() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) == 0 {
		return ""
	}
	return f.calls[len(f.calls)-1]
}

func TestLaunchForm(t *testing.T) {
	inst := newFakeInstances(running("web1", instance.AgentConnected))
	ed := &fakeEditor{inst: inst}
	app, _ := newTestApp(inst, newBusEvents(), Config{Editor: ed})
	s := openSession(t, app)

	res, _, doc := get(t, app, "/launch")
	if res.StatusCode != http.StatusOK || doc.Find(`[data-testid="launch-form"] label[for="launch-name"]`).Length() != 1 {
		t.Fatalf("GET /launch: %d, want the form with labelled fields", res.StatusCode)
	}
	for _, tc := range []struct {
		name       string
		form       url.Values
		status     int
		errField   string // the data-testid of the error shown
		errText    string
		wantCall   string
		wantTarget string
	}{
		{"launched", url.Values{"name": {"New1"}, "backend": {"sim"}, "config": {"user.role=web\r\n\r\nsim.command=sleep 1"}}, http.StatusSeeOther, "", "", "create New1 sim map[sim.command:sleep 1 user.role:web] start=true", "/instances/new1"},
		{"kernel sets qemu.kernel", url.Values{"name": {"vm1"}, "backend": {"qemu"}, "kernel": {"/boot/vmlinuz"}}, http.StatusSeeOther, "", "", "create vm1 qemu map[qemu.kernel:/boot/vmlinuz] start=true", "/instances/vm1"},
		{"image", url.Values{"name": {"vm2"}, "backend": {"qemu"}, "image": {"debian-12"}}, http.StatusSeeOther, "", "", "create vm2 qemu map[] start=true image=debian-12", "/instances/vm2"},
		{"unknown image", url.Values{"name": {"vm3"}, "backend": {"qemu"}, "image": {"missing"}}, http.StatusUnprocessableEntity, "launch-image-error", `image "missing"`, "create vm3 qemu map[] start=true image=missing", ""},
		{"image on a backend without disks", url.Values{"name": {"vm4"}, "backend": {"sim"}, "image": {"debian-12"}}, http.StatusUnprocessableEntity, "launch-image-error", "cannot boot from an image", "create vm4 sim map[] start=true image=debian-12", ""},
		{"bad name", url.Values{"name": {"-no"}, "backend": {"sim"}}, http.StatusUnprocessableEntity, "launch-name-error", "invalid", "", ""},
		{"unknown backend", url.Values{"name": {"x1"}, "backend": {"vbox"}}, http.StatusUnprocessableEntity, "launch-backend-error", `unknown backend "vbox"`, "", ""},
		{"bad config line", url.Values{"name": {"x2"}, "backend": {"sim"}, "config": {"user.a=1\nnonsense"}}, http.StatusUnprocessableEntity, "launch-config-error", `line 2 "nonsense": want key=value`, "", ""},
		{"kernel twice", url.Values{"name": {"x3"}, "backend": {"qemu"}, "kernel": {"/k"}, "config": {"qemu.kernel=/k2"}}, http.StatusUnprocessableEntity, "launch-kernel-error", "qemu.kernel is also given", "", ""},
		{"exists", url.Values{"name": {"web1"}, "backend": {"sim"}}, http.StatusUnprocessableEntity, "launch-name-error", "already exists", "create web1 sim map[] start=true", ""},
		{"service refuses a key", url.Values{"name": {"x4"}, "backend": {"sim"}, "config": {"volatile.x=1"}}, http.StatusUnprocessableEntity, "launch-config-error", `unknown configuration key "volatile.x"`, "create x4 sim map[volatile.x:1] start=true", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(ed.calls)
			form := tc.form
			form.Set("_csrf", s.token)
			res, body, doc := do(t, app, post("/launch", form, s, nil))
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tc.status, body)
			}
			if loc := res.Header.Get("Location"); loc != tc.wantTarget {
				t.Errorf("Location %q, want %q", loc, tc.wantTarget)
			}
			if call := ed.last(); (tc.wantCall == "") != (len(ed.calls) == before) || tc.wantCall != "" && call != tc.wantCall {
				t.Errorf("service call %q, want %q", call, tc.wantCall)
			}
			if tc.errField != "" {
				got := doc.Find(`[data-testid="` + tc.errField + `"]`).Text()
				if !strings.Contains(got, tc.errText) {
					t.Errorf("error next to the field %q, want %q", got, tc.errText)
				}
				input := strings.TrimSuffix(tc.errField, "-error")
				if doc.Find("#"+input).AttrOr("aria-invalid", "") != "true" || !strings.Contains(doc.Find("#"+input).AttrOr("aria-describedby", ""), tc.errField) {
					t.Errorf("field %s is not marked invalid and linked to its error", input)
				}
				if got := doc.Find("#launch-name").AttrOr("value", ""); got != form.Get("name") {
					t.Errorf("the form lost what was typed: name %q", got)
				}
			}
		})
	}
	t.Run("without the CSRF token", func(t *testing.T) {
		res, _, _ := do(t, app, post("/launch", url.Values{"name": {"x9"}, "backend": {"sim"}}, s, nil))
		if res.StatusCode != http.StatusForbidden {
			t.Fatalf("status %d, want 403", res.StatusCode)
		}
	})
}

func TestDeleteForm(t *testing.T) {
	inst := newFakeInstances(running("web1", instance.AgentConnected), stopped("old", "sim"))
	ed := &fakeEditor{inst: inst}
	app, _ := newTestApp(inst, newBusEvents(), Config{Editor: ed})
	s := openSession(t, app)
	res, _, doc := get(t, app, "/instances/web1/delete")
	if res.StatusCode != http.StatusOK || doc.Find(`[data-testid="delete-form"]`).Length() != 1 {
		t.Fatalf("confirmation page: %d", res.StatusCode)
	}
	for _, tc := range []struct {
		name, inst, confirm, force string
		status                     int
		wantCall, errText          string
	}{
		{"not confirmed", "web1", "", "", http.StatusUnprocessableEntity, "", "type the instance's name, web1, to confirm"},
		{"wrong name", "web1", "web2", "on", http.StatusUnprocessableEntity, "", "to confirm"},
		{"running without force", "web1", "web1", "", http.StatusUnprocessableEntity, "delete web1 force=false", "it runs, stop it first"},
		{"running with force", "web1", "web1", "on", http.StatusOK, "delete web1 force=true", ""},
		{"stopped", "old", "old", "", http.StatusOK, "delete old force=false", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(ed.calls)
			form := url.Values{"_csrf": {s.token}, "confirm": {tc.confirm}}
			if tc.force != "" {
				form.Set("force", tc.force)
			}
			res, body, doc := do(t, app, post("/instances/"+tc.inst+"/delete", form, s, nil))
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tc.status, body)
			}
			if call := ed.last(); (tc.wantCall == "") != (len(ed.calls) == before) || tc.wantCall != "" && call != tc.wantCall {
				t.Errorf("service call %q, want %q", call, tc.wantCall)
			}
			if tc.errText != "" && !strings.Contains(doc.Find(`[data-testid="form-error"]`).Text(), tc.errText) {
				t.Errorf("error %q, want %q", doc.Find(`[data-testid="form-error"]`).Text(), tc.errText)
			}
			if tc.status == http.StatusOK && doc.Find(`[data-testid="outcome"][data-name="`+tc.inst+`"][data-ok="true"]`).Length() != 1 {
				t.Error("no outcome on the instances page")
			}
		})
	}
}

func TestConfigForm(t *testing.T) {
	inst := newFakeInstances(ready("web1", time.Minute, time.Second))
	ed := &fakeEditor{inst: inst}
	app, _ := newTestApp(inst, newBusEvents(), Config{Editor: ed})
	s := openSession(t, app)
	_, _, doc := get(t, app, "/instances/web1")
	if n := doc.Find(`[data-testid="config-form"] textarea[data-key]`).Length(); n != 2 {
		t.Fatalf("%d editable keys, want the 2 user.*/cloud-init.* keys", n)
	}
	for _, tc := range []struct {
		name     string
		form     url.Values
		status   int
		wantCall string
		errField string
		errText  string
	}{
		{"change one", url.Values{"set.user.role": {"db"}, "set.cloud-init.user-data": {"#cloud-config"}}, http.StatusOK, "config web1 set=[user.role] unset=[]", "", ""},
		{"unset one", url.Values{"set.user.role": {"web"}, "unset": {"cloud-init.user-data"}}, http.StatusOK, "config web1 set=[] unset=[cloud-init.user-data]", "", ""},
		{"add one", url.Values{"new_key": {"user.zone"}, "new_value": {"a\r\nb"}}, http.StatusOK, "config web1 set=[user.zone] unset=[]", "", ""},
		{"not a guest key", url.Values{"new_key": {"sim.command"}, "new_value": {"x"}}, http.StatusUnprocessableEntity, "", "config-new-key-error", "user.* and cloud-init.* keys only"},
		{"value without key", url.Values{"new_value": {"x"}}, http.StatusUnprocessableEntity, "", "config-new-key-error", "give the new key's name"},
		{"existing key", url.Values{"new_key": {"user.role"}, "new_value": {"x"}}, http.StatusUnprocessableEntity, "", "config-new-key-error", "exists"},
		{"nothing", url.Values{"set.user.role": {"web"}}, http.StatusUnprocessableEntity, "", "form-error", "nothing to change"},
		{"service refuses", url.Values{"new_key": {"user.bad"}, "new_value": {"x"}}, http.StatusUnprocessableEntity, "config web1 set=[user.bad] unset=[]", "config-new-value-error", "invalid value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(ed.calls)
			form := tc.form
			form.Set("_csrf", s.token)
			res, body, doc := do(t, app, post("/instances/web1/config", form, s, nil))
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tc.status, body)
			}
			if call := ed.last(); (tc.wantCall == "") != (len(ed.calls) == before) || tc.wantCall != "" && call != tc.wantCall {
				t.Errorf("service call %q, want %q", call, tc.wantCall)
			}
			if tc.errField != "" {
				if got := doc.Find(`[data-testid="` + tc.errField + `"]`).Text(); !strings.Contains(got, tc.errText) {
					t.Errorf("error %q, want %q", got, tc.errText)
				}
				if _, open := doc.Find(`[data-testid="config-edit"]`).Attr("open"); !open {
					t.Error("the config form is folded away with an error in it")
				}
			}
		})
	}
}

func TestFormsNeedEditor(t *testing.T) {
	app, _ := newTestApp(newFakeInstances(running("web1", instance.AgentConnected)), newBusEvents(), Config{})
	for _, target := range []string{"/launch", "/instances/web1/delete"} {
		if res, _, _ := get(t, app, target); res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s without an editor: %d, want 404", target, res.StatusCode)
		}
	}
	_, _, doc := get(t, app, "/instances/web1")
	if doc.Find(`[data-testid="config-form"], [data-testid="action-delete"]`).Length() != 0 {
		t.Error("forms shown without an editor")
	}
}
