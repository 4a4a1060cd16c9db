package devlxd

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/storage"
	"github.com/guestlink/guestlink/errdefs"
)

// fakeStorage is an in-memory Storage of one pool.
type fakeStorage struct {
	mu   sync.Mutex
	vols map[string]*storage.Volume
}

func (f *fakeStorage) GetPool(name string) (*storage.Pool, error) {
	if name != "default" {
		return nil, fmt.Errorf("storage pool %q: %w", name, errdefs.ErrNotFound)
	}
	return &storage.Pool{Name: "default", Driver: "dir", Status: "Created"}, nil
}

func (f *fakeStorage) Volumes(_ context.Context, _ string) ([]*storage.Volume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*storage.Volume
	for _, v := range f.vols {
		out = append(out, v)
	}
	return out, nil
}

func (f *fakeStorage) Volume(_ context.Context, pool, name string) (*storage.Volume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.vols[name]
	if !ok {
		return nil, fmt.Errorf("storage volume %q in pool %q: %w", name, pool, errdefs.ErrNotFound)
	}
	return v, nil
}

func (f *fakeStorage) CreateVolume(_ context.Context, pool, name, ct, desc string, cfg map[string]string) (*storage.Volume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.vols[name]; ok {
		return nil, fmt.Errorf("storage volume %q already exists in pool %s: %w", name, pool, errdefs.ErrAlreadyExists)
	}
	f.vols[name] = &storage.Volume{Pool: pool, Name: name, Type: "custom", ContentType: "block", Description: desc, Config: maps.Clone(cfg), Location: "none"}
	return f.vols[name], nil
}

func (f *fakeStorage) UpdateVolume(context.Context, string, string, string, map[string]string) (*storage.Volume, error) {
	return nil, errdefs.ErrNotSupported
}

func (f *fakeStorage) DeleteVolume(_ context.Context, _, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.vols, name)
	return nil
}

func (f *fakeStorage) CreateSnapshot(context.Context, string, string, string, string) (*storage.Volume, error) {
	return nil, errdefs.ErrNotSupported
}

func (f *fakeStorage) Snapshots(context.Context, string, string) ([]*storage.Volume, error) {
	return nil, nil
}

// fakeDevices records device updates and applies them to fakeInstances.
type fakeDevices struct {
	insts *fakeInstances
	uuid  string
	mu    sync.Mutex
	got   []instance.DeviceUpdate
}

func (f *fakeDevices) UpdateDevices(_ context.Context, _ string, u instance.DeviceUpdate, _ events.Requestor) (*instance.Instance, error) {
	f.mu.Lock()
	f.got = append(f.got, u)
	f.mu.Unlock()
	f.insts.mu.Lock()
	defer f.insts.mu.Unlock()
	inst := f.insts.byID[f.uuid]
	for n, d := range u.Put {
		inst.Devices[n] = d
	}
	for _, n := range u.Remove {
		delete(inst.Devices, n)
	}
	for k, v := range u.Config {
		inst.Config[k] = v
	}
	return inst, nil
}

func TestManagementOwnership(t *testing.T) {
	st := &fakeStorage{vols: map[string]*storage.Volume{
		"theirs": {Pool: "default", Name: "theirs", Type: "custom", ContentType: "block", Config: map[string]string{storage.KeyOwner: "devlxd/other"}, Location: "none"},
	}}
	var devs *fakeDevices
	e := newEnv(t, func(c *Config) {
		c.Tokens = fakeTokens{tokA: {Name: "csi", Instances: []string{"a"}}}
		c.Storage = st
	})
	devs = &fakeDevices{insts: e.insts, uuid: uuidA}
	e.srv.cfg.Devices = devs
	e.insts.setConfig(uuidA, KeyManagementVolumes, "true")
	a := e.client(uuidA, e.agents["a"])
	req := func(method, path, body string) answer {
		t.Helper()
		r, err := http.NewRequest(method, "https://lxd"+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Authorization", "Bearer "+tokA)
		resp, err := a.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return answer{resp.StatusCode, resp.Header.Get("Content-Type"), b.String()}
	}
	for _, tt := range []struct {
		name, method, path, body string
		code                     int
		contains                 string
	}{
		{"create", "POST", "/1.0/storage-pools/default/volumes/custom", `{"name":"mine","type":"custom"}`, 200, `"status":"Success"`},
		{"create twice refused before an operation", "POST", "/1.0/storage-pools/default/volumes/custom", `{"name":"mine","type":"custom"}`, 409, "Volume by that name already exists"},
		{"url type mismatch", "POST", "/1.0/storage-pools/default/volumes/custom", `{"name":"x","type":"image"}`, 400, "Only custom storage volumes can be created"},
		{"list shows only own", "GET", "/1.0/storage-pools/default/volumes?recursion=1", "", 200, `[{"name":"mine"`},
		{"another identity's volume", "GET", "/1.0/storage-pools/default/volumes/custom/theirs", "", 404, "Not Found"},
		{"delete another identity's volume", "DELETE", "/1.0/storage-pools/default/volumes/custom/theirs", "", 404, "Not Found"},
		{"type not custom", "GET", "/1.0/storage-pools/default/volumes/container/mine", "", 400, "Only custom storage volume requests are allowed"},
		{"unknown pool", "GET", "/1.0/storage-pools/fast", "", 404, "Storage pool not found"},
		{"attach another identity's volume", "PATCH", "/1.0/instances/a", `{"devices":{"d":{"type":"disk","pool":"default","source":"theirs"}}}`, 403, `Not authorized to use storage volume \"theirs\"`},
		{"manage a device not owned", "PATCH", "/1.0/instances/a", `{"devices":{"eth0":{"type":"disk","pool":"default","source":"mine"}}}`, 403, `Not authorized to manage device \"eth0\"`},
		{"delete a device not owned", "PATCH", "/1.0/instances/a", `{"devices":{"root":null}}`, 403, `Not authorized to delete device \"root\"`},
		{"a nic through devlxd", "PATCH", "/1.0/instances/a", `{"devices":{"n":{"type":"nic"}}}`, 400, "Invalid device configuration"},
		{"attach own volume", "PATCH", "/1.0/instances/a", `{"devices":{"d":{"type":"disk","pool":"default","source":"mine"}}}`, 200, ""},
		{"now listed as owned", "GET", "/1.0/instances/a", "", 200, `"devices":{"d":{"pool":"default","source":"mine","type":"disk"}}`},
		{"detach", "PATCH", "/1.0/instances/a", `{"devices":{"d":null}}`, 200, ""},
		{"bad timeout", "GET", "/1.0/operations/x/wait?timeout=soon", "", 400, "Invalid timeout value"},
		{"unknown operation", "GET", "/1.0/operations/x/wait", "", 404, "Not Found"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := req(tt.method, tt.path, tt.body)
			if got.status != tt.code || !strings.Contains(got.body, tt.contains) {
				t.Fatalf("%s %s: %d %s, want %d containing %s", tt.method, tt.path, got.status, got.body, tt.code, tt.contains)
			}
		})
	}
	devs.mu.Lock()
	defer devs.mu.Unlock()
	if len(devs.got) != 2 || devs.got[0].Config["volatile.d.devlxd.owner"] != "devlxd/csi" || len(devs.got[1].Remove) != 1 {
		t.Fatalf("device updates %+v", devs.got)
	}
	if st.vols["mine"].Config[storage.KeyOwner] != "devlxd/csi" {
		t.Fatalf("volume owner %v", st.vols["mine"].Config)
	}
}
