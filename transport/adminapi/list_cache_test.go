package adminapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/db/dbtest"
)

// cliFields is the summary the CLI's list table asks for.
const cliFields = "name,status,backend,agent,link,boot,started_at,location"

// newListManager returns a real instance manager (SQLite store, the
// in-process mem backend) with n running instances l0 .. l<n-1>, served by
// the admin API, and a function that GETs a path of it.
func newListManager(t *testing.T, n int) (*instance.Manager, func(path string) (int, []byte)) {
	t.Helper()
	store := dbtest.SQLite(t)
	bus := events.New(store)
	t.Cleanup(func() { _ = bus.Close() })
	mgr, err := instance.NewManager(instance.Config{Store: store, Backends: newMemBackends(t), Bus: bus, DefaultBackend: "mem"})
	if err != nil {
		t.Fatal(err)
	}
	srv := serveManager(t, mgr, bus)
	for i := range n {
		mustCall(t, srv, "POST", "/1.0/instances", fmt.Sprintf(`{"name":"l%d","start":true}`, i), 201)
	}
	return mgr, unixGet(t, srv.Socket)
}

// wantLists returns what GET /1.0/instances answers now in the full form
// and in the CLI's summary form, made by encoding/json from the manager's
// List (copies, no cache).
func wantLists(t *testing.T, mgr *instance.Manager) (full, summary []byte) {
	t.Helper()
	views, err := mgr.List(context.Background(), instance.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	list := make([]api.Instance, 0, len(views))
	sums := make([]map[string]json.RawMessage, 0, len(views))
	for _, v := range views {
		w := instance.WireInstance(v, nil)
		list = append(list, w)
		b, _ := json.Marshal(w)
		var obj, sum map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil {
			t.Fatal(err)
		}
		sum = map[string]json.RawMessage{}
		for k := range strings.SplitSeq(cliFields, ",") {
			if v, ok := obj[k]; ok {
				sum[k] = v
			}
		}
		sums = append(sums, sum)
	}
	full, _ = json.Marshal(api.Sync(list))
	sb, _ := json.Marshal(sums)
	return full, sb
}

// checkLists checks that both list forms answer what the manager holds
// now (wantLists): the full objects byte for byte, the summary's keys and
// values.
func checkLists(t *testing.T, mgr *instance.Manager, get func(string) (int, []byte), step string) {
	t.Helper()
	wantFull, wantSum := wantLists(t, mgr)
	code, full := get("/1.0/instances?recursion=1")
	if code != http.StatusOK || !bytes.Equal(full, wantFull) {
		t.Fatalf("%s: full list (%d) is not the manager's state:\n%s\nwant\n%s", step, code, full, wantFull)
	}
	code, sum := get("/1.0/instances?recursion=1&fields=" + cliFields)
	if code != http.StatusOK {
		t.Fatalf("%s: summary list: %d %s", step, code, sum)
	}
	// Compared as JSON values: the summary object's key order is the
	// full object's, Go's maps re-encode them sorted.
	var got []map[string]json.RawMessage
	if err := json.Unmarshal(metadata(t, sum), &got); err != nil {
		t.Fatal(err)
	}
	gotJSON, _ := json.Marshal(got)
	if !bytes.Equal(gotJSON, wantSum) {
		t.Fatalf("%s: summary list is not the manager's state:\n%s\nwant\n%s", step, gotJSON, wantSum)
	}
}

// TestListCacheFollowsChanges lists the real manager's instances in both
// forms after each kind of change (status, agent state, heartbeat, Ready,
// config, a new and a deleted instance): the list after a change shows it,
// though the list before filled every instance's cache slot.
func TestListCacheFollowsChanges(t *testing.T) {
	mgr, get := newListManager(t, 3)
	ctx := context.Background()
	uuidOf := func(name string) string {
		inst, err := mgr.Get(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return inst.UUID
	}
	by := events.Requestor{Protocol: "test"}
	hb := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	steps := []struct {
		name   string
		change func() error
	}{
		{"none", func() error { return nil }},
		{"stop", func() error { return mgr.Stop(ctx, "l1", instance.StopOptions{Force: true}, by) }},
		{"start", func() error { return mgr.Start(ctx, "l1", by) }},
		{"agent connected", func() error { return mgr.SetAgentState(ctx, uuidOf("l0"), instance.AgentConnected, hb) }},
		{"heartbeat", func() error {
			if !mgr.RecordHeartbeat(uuidOf("l0"), instance.AgentConnected, hb.Add(5*time.Second)) {
				return fmt.Errorf("heartbeat not recorded alone")
			}
			return nil
		}},
		{"ready", func() error {
			return mgr.Declare(ctx, uuidOf("l0"), instance.Declaration{State: instance.DeclaredReady}, by)
		}},
		{"degraded", func() error {
			return mgr.Declare(ctx, uuidOf("l2"), instance.Declaration{State: instance.DeclaredDegraded, Reason: "Disk", Message: "full <&>"}, by)
		}},
		{"config", func() error {
			_, err := mgr.UpdateConfig(ctx, "l2", map[string]string{"user.note": "changed"}, nil, by)
			return err
		}},
		{"agent lost", func() error { return mgr.SetAgentState(ctx, uuidOf("l0"), instance.AgentLost, time.Time{}) }},
		{"created", func() error {
			_, err := mgr.Create(ctx, instance.CreateRequest{Name: "l3"}, by)
			return err
		}},
		{"deleted", func() error { return mgr.Delete(ctx, "l3", false, by) }},
	}
	for _, st := range steps {
		if err := st.change(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		checkLists(t, mgr, get, st.name)
		checkLists(t, mgr, get, st.name+", listed again") // from the slots just filled
	}
}

// TestListCacheConcurrentChanges lists while instances change (heartbeats,
// agent states, Ready, config) from other goroutines: run with -race, it
// proves the cache slots and shared views safe; once the changes stop the
// next lists show the last state in both forms.
func TestListCacheConcurrentChanges(t *testing.T) {
	const n = 8
	mgr, get := newListManager(t, n)
	ctx := context.Background()
	views, err := mgr.List(ctx, instance.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	by := events.Requestor{Protocol: "test"}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, v := range views {
		wg.Go(func() {
			hb := time.Now().UTC()
			for j := range 20 {
				hb = hb.Add(time.Second)
				var err error
				switch j % 4 {
				case 0:
					err = mgr.SetAgentState(ctx, v.UUID, instance.AgentConnected, hb)
				case 1:
					mgr.RecordHeartbeat(v.UUID, instance.AgentConnected, hb)
				case 2:
					err = mgr.Declare(ctx, v.UUID, instance.Declaration{State: []string{instance.DeclaredReady, instance.DeclaredStarted}[(i+j)%2]}, by)
				case 3:
					_, err = mgr.UpdateConfig(ctx, v.Name, map[string]string{"user.step": fmt.Sprint(j)}, nil, by)
				}
				if err != nil {
					errs <- fmt.Errorf("%s step %d: %w", v.Name, j, err)
					return
				}
			}
		})
	}
	listed := make(chan struct{})
	go func() {
		defer close(listed)
		for range 30 {
			for _, q := range []string{"?recursion=1", "?recursion=1&fields=" + cliFields, ""} {
				if code, body := get("/1.0/instances" + q); code != http.StatusOK || !json.Valid(body) {
					errs <- fmt.Errorf("list %q during changes: %d %.200s", q, code, body)
					return
				}
			}
		}
	}()
	wg.Wait()
	<-listed
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkLists(t, mgr, get, "after the changes")
}
