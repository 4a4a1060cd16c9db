package adminapi_test

import (
	"encoding/json"
	"os"
	"os/user"
	"strconv"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

func TestLifecycle(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{})

	t.Run("server info", func(t *testing.T) {
		var info api.ServerInfo
		if err := json.Unmarshal(mustCall(t, srv, "GET", "/1.0", "", 200).Metadata, &info); err != nil {
			t.Fatal(err)
		}
		if info.APIVersion != "1.0" || info.Environment.Server != "guestlink" || info.Environment.ServerVersion != "test" ||
			info.Environment.ServerPID != os.Getpid() || strings.Join(info.Environment.Backends, ",") != "qemu,sim" {
			t.Fatalf("server info = %+v", info)
		}
	})

	t.Run("create", func(t *testing.T) {
		env := mustCall(t, srv, "POST", "/1.0/instances", `{"name":"web1","backend":"sim","config":{"user.role":"web"},"devices":{"root":{"type":"disk"}}}`, 201)
		var inst api.Instance
		if err := json.Unmarshal(env.Metadata, &inst); err != nil {
			t.Fatal(err)
		}
		if inst.Name != "web1" || inst.Backend != "sim" || inst.Status != "Stopped" || inst.StatusCode != 102 ||
			inst.Config["user.role"] != "web" || inst.Devices["root"]["type"] != "disk" {
			t.Fatalf("created = %+v", inst)
		}
		by := srv.Instances.LastRequestor()
		if by.Protocol != "unix" || by.UID != strconv.Itoa(os.Getuid()) {
			t.Fatalf("requestor = %+v, want protocol unix and uid %d", by, os.Getuid())
		}
		if u, err := user.Current(); err == nil && by.Username != u.Username {
			t.Fatalf("requestor user = %q, want %q", by.Username, u.Username)
		}
	})

	t.Run("start", func(t *testing.T) {
		env := mustCall(t, srv, "PUT", "/1.0/instances/web1/state", `{"action":"start"}`, 200)
		var st api.InstanceState
		if err := json.Unmarshal(env.Metadata, &st); err != nil {
			t.Fatal(err)
		}
		if st.Status != "Running" || st.StatusCode != 103 || st.Boot != 1 || st.StartedAt == nil {
			t.Fatalf("state after start = %+v", st)
		}
	})

	t.Run("ready", func(t *testing.T) {
		if err := srv.Instances.SetReady("web1"); err != nil {
			t.Fatal(err)
		}
		var st api.InstanceState
		if err := json.Unmarshal(mustCall(t, srv, "GET", "/1.0/instances/web1/state", "", 200).Metadata, &st); err != nil {
			t.Fatal(err)
		}
		if st.Status != "Ready" || st.StatusCode != 113 || !st.Ready || st.Agent.State != "connected" {
			t.Fatalf("state when ready = %+v", st)
		}
	})

	t.Run("list filters", func(t *testing.T) {
		mustCall(t, srv, "POST", "/1.0/instances", `{"name":"db1","backend":"qemu"}`, 201)
		for _, tt := range []struct{ query, want string }{
			{"", "db1,web1"},
			{"?status=Running", "web1"}, // Ready counts as running
			{"?status=stopped", "db1"},
			{"?backend=qemu", "db1"},
			{"?q=web", "web1"},
			{"?agent=connected", "web1"},
			{"?agent=none", "db1"},
		} {
			var list []api.Instance
			if err := json.Unmarshal(mustCall(t, srv, "GET", "/1.0/instances?recursion=1&"+strings.TrimPrefix(tt.query, "?"), "", 200).Metadata, &list); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, i := range list {
				names = append(names, i.Name)
			}
			if got := strings.Join(names, ","); got != tt.want {
				t.Errorf("list%s = %s, want %s", tt.query, got, tt.want)
			}
		}
	})

	t.Run("patch", func(t *testing.T) {
		env := mustCall(t, srv, "PATCH", "/1.0/instances/web1", `{"config":{"user.tier":"gold"},"unset":["user.role"]}`, 200)
		var inst api.Instance
		if err := json.Unmarshal(env.Metadata, &inst); err != nil {
			t.Fatal(err)
		}
		if _, ok := inst.Config["user.role"]; ok || inst.Config["user.tier"] != "gold" {
			t.Fatalf("config after patch = %v", inst.Config)
		}
	})

	t.Run("instance object", func(t *testing.T) {
		var obj map[string]any
		if err := json.Unmarshal(mustCall(t, srv, "GET", "/1.0/instances/web1", "", 200).Metadata, &obj); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"name", "uuid", "backend", "status", "status_code", "config", "devices", "created_at",
			"started_at", "boot", "link", "agent", "ready_at", "devlxd_socket", "timeline"} {
			if _, ok := obj[k]; !ok {
				t.Errorf("instance object lacks %q: %v", k, obj)
			}
		}
		tl, _ := obj["timeline"].([]any)
		if len(tl) != 3 { // Stopped->Running, ready false->true, Running->Ready
			t.Errorf("timeline summary = %v", obj["timeline"])
		}
	})

	t.Run("timeline", func(t *testing.T) {
		var tl []instance.TimelineEntry
		if err := json.Unmarshal(mustCall(t, srv, "GET", "/1.0/instances/web1/timeline?limit=1", "", 200).Metadata, &tl); err != nil {
			t.Fatal(err)
		}
		if len(tl) != 1 || tl[0].Kind != "state" || tl[0].From != "Running" || tl[0].To != "Ready" || tl[0].Cause != "devlxd" || tl[0].Boot != 1 {
			t.Fatalf("timeline?limit=1 = %+v", tl)
		}
	})

	t.Run("restart then stop", func(t *testing.T) {
		mustCall(t, srv, "PUT", "/1.0/instances/web1/state", `{"action":"restart","timeout":5}`, 200)
		env := mustCall(t, srv, "PUT", "/1.0/instances/web1/state", `{"action":"stop","timeout":30,"force":true}`, 200)
		var st api.InstanceState
		if err := json.Unmarshal(env.Metadata, &st); err != nil {
			t.Fatal(err)
		}
		if st.Status != "Stopped" || st.Boot != 2 {
			t.Fatalf("state after restart+stop = %+v", st)
		}
	})

	t.Run("delete", func(t *testing.T) {
		mustCall(t, srv, "PUT", "/1.0/instances/web1/state", `{"action":"start"}`, 200)
		mustCall(t, srv, "DELETE", "/1.0/instances/web1?force=1", "", 200)
		mustCall(t, srv, "GET", "/1.0/instances/web1", "", 404)
	})

	t.Run("backends", func(t *testing.T) {
		var list []api.Backend
		if err := json.Unmarshal(mustCall(t, srv, "GET", "/1.0/backends", "", 200).Metadata, &list); err != nil {
			t.Fatal(err)
		}
		if len(list) != 2 || list[0].Name != "qemu" || list[0].Health != "restarting" || list[0].Restarts != 2 ||
			list[1].Name != "sim" || list[1].PID != 4242 || list[1].Capabilities[0] != "devlxd-socket" {
			t.Fatalf("backends = %+v", list)
		}
	})
}

func TestCreateAndStart(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{})
	env := mustCall(t, srv, "POST", "/1.0/instances", `{"name":"s1","backend":"sim","start":true}`, 201)
	var inst api.Instance
	if err := json.Unmarshal(env.Metadata, &inst); err != nil {
		t.Fatal(err)
	}
	if inst.Status != "Running" || inst.DevlxdSocket == "" {
		t.Fatalf("created with start = %+v", inst)
	}
}
