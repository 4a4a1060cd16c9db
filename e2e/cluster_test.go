package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/internal/testwait"
)

// Cluster timings of the test: quick heartbeats so that a killed member
// is offline within seconds.
const (
	clusterHeartbeat = "300ms"
	clusterOffline   = "3s"
	// clusterForward is --cluster-forward-timeout: a forwarded request
	// to a frozen member is answered 503 after it.
	clusterForward = 2 * time.Second
)

// freeAddr returns a free 127.0.0.1 address.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// memberFlags are the flags of cluster member name on database url.
func memberFlags(url, name, addr string, extra ...string) []string {
	return append([]string{"--database", url, "--name", name, "--cluster-address", addr,
		"--cluster-heartbeat", clusterHeartbeat, "--cluster-offline-after", clusterOffline,
		"--cluster-forward-timeout", clusterForward.String()}, extra...)
}

// refusedStart runs guestlinkd on a fresh state directory with args and
// returns what it printed; the test fails unless it exits non-zero.
func refusedStart(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gle2e-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(ctx, daemonStartTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "guestlinkd"),
		append([]string{"--state-dir", dir, "--plugin-dir", filepath.Join(binDir, "plugins")}, args...)...)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("guestlinkd %v started; want a refusal. Output:\n%s", args, out)
	}
	if ctx.Err() != nil {
		t.Fatalf("guestlinkd %v neither started nor exited within %v:\n%s", args, daemonStartTimeout, out)
	}
	return string(out)
}

// tamper returns token with another secret.
func tamper(t *testing.T, token string) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(token, "glj_"))
	if err != nil {
		t.Fatalf("decoding join token: %v", err)
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	v["s"] = "not-the-secret-" + strings.Repeat("x", 20)
	raw, _ = json.Marshal(v)
	return "glj_" + base64.RawURLEncoding.EncodeToString(raw)
}

// placed returns name@location of every instance, sorted.
func placed(list []api.Instance) []string {
	var out []string
	for _, i := range list {
		out = append(out, i.Name+"@"+i.Location)
	}
	slices.Sort(out)
	return out
}

// TestCluster runs three members on one PostgreSQL database: joins (and
// refused ones), a guest on each member, one list from every member, Ready
// declared on one member seen live on another, an action forwarded to the
// owner, a member killed (offline, its instances Unknown) and restarted
// (recovered), and member removal refused while it owns instances.
func TestCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	url := dbtest.PostgresURL(t)
	addrA, addrB, addrC := freeAddr(t), freeAddr(t), freeAddr(t)

	a := newDaemon(t, memberFlags(url, "a", addrA)...)

	// A daemon that is not a member is refused, and says what to do.
	out := refusedStart(ctx, t, "--database", url, "--name", "x")
	for _, want := range []string{"is not a member", "guestlink cluster add x", "--join-file FILE"} {
		if !strings.Contains(out, want) {
			t.Errorf("a non-member's refusal does not say %q:\n%s", want, out)
		}
	}

	tokB := strings.TrimSpace(a.cli(ctx, "cluster", "add", "b"))
	if !strings.HasPrefix(tokB, "glj_") || strings.ContainsAny(tokB, " \n") {
		t.Fatalf("cluster add printed %q; want the token alone", tokB)
	}
	// A wrong secret, and a token for another name, are refused.
	if out := refusedStart(ctx, t, memberFlags(url, "b", freeAddr(t), "--join", tamper(t, tokB))...); !strings.Contains(out, "join token is not valid") {
		t.Errorf("a tampered token: want \"join token is not valid\", got:\n%s", out)
	}
	if out := refusedStart(ctx, t, memberFlags(url, "z", freeAddr(t), "--join", tokB)...); !strings.Contains(out, `the token admits member "b"`) {
		t.Errorf("a token used under another name: got:\n%s", out)
	}
	b := newDaemon(t, memberFlags(url, "b", addrB, "--join", tokB)...)
	// The token is spent.
	if out := refusedStart(ctx, t, memberFlags(url, "b", freeAddr(t), "--join", tokB)...); !strings.Contains(out, "used already") {
		t.Errorf("a reused token: want \"used already\", got:\n%s", out)
	}
	tokC := strings.TrimSpace(b.cli(ctx, "cluster", "add", "c")) // any member issues tokens
	c := newDaemon(t, memberFlags(url, "c", addrC, "--join", tokC)...)
	members := map[string]*daemonProc{"a": a, "b": b, "c": c}

	for name, d := range members {
		ms, err := d.client.ClusterMembers(ctx)
		if err != nil {
			t.Fatalf("member %s: cluster members: %v", name, err)
		}
		var got []string
		for _, m := range ms {
			got = append(got, m.Name+"/"+m.Status)
		}
		if want := []string{"a/online", "b/online", "c/online"}; !slices.Equal(got, want) {
			t.Errorf("member %s lists members %v, want %v", name, got, want)
		}
	}

	// A guest on each member, all launched from a.
	recA := a.record("g-c")
	for _, m := range []string{"a", "b", "c"} {
		if _, err := a.client.Create(ctx, api.InstancesPost{Name: "g-" + m, Backend: "sim", Start: true, Target: m}); err != nil {
			t.Fatalf("launching g-%s on %s from a: %v", m, m, err)
		}
	}
	for _, m := range []string{"a", "b", "c"} {
		inst := a.waitInstance(ctx, "g-"+m, "agent connected (seen from a)", agentTimeout, func(i *api.Instance) bool {
			return i.Agent.State == api.AgentConnected
		})
		if inst.Location != m {
			t.Errorf("g-%s is located on %q, want %q", m, inst.Location, m)
		}
	}
	want := []string{"g-a@a", "g-b@b", "g-c@c"}
	for name, d := range members {
		list, err := d.client.Instances(ctx, client.InstanceFilter{})
		if err != nil {
			t.Fatalf("member %s: list: %v", name, err)
		}
		if got := placed(list); !slices.Equal(got, want) {
			t.Errorf("member %s lists %v, want %v", name, got, want)
		}
	}

	// Every member lists every guest's IPv4 as its owner's agent reports it
	// (the sim agent reports the host's interfaces): the owner sends it with
	// its instances, in the full list and the summary (guestlink list asks
	// for fields). The remote ones were empty before. The owner's cache is
	// filled by its own GET state and refreshed in the background.
	addrs := map[string]string{}
	for _, m := range []string{"a", "b", "c"} {
		st, err := members[m].client.State(ctx, "g-"+m)
		if err != nil || st.Guest == nil || st.Guest.State == nil {
			t.Fatalf("g-%s: state on its owner: %+v, %v", m, st, err)
		}
		if addrs["g-"+m] = st.Guest.State.IPv4(); addrs["g-"+m] == "" {
			t.Fatalf("g-%s: its agent reports no global IPv4 (%+v): the test needs the host to have one", m, st.Guest.State.Network)
		}
	}
	for name, d := range members {
		for _, fields := range [][]string{nil, {"name", "ipv4"}} {
			testwait.For(t, fmt.Sprintf("member %s listing every guest's IPv4 (fields %q)", name, fields), opTimeout, func() bool {
				got := map[string]string{}
				list, err := d.client.Instances(ctx, client.InstanceFilter{})
				if fields != nil {
					list, err = d.client.InstanceSummaries(ctx, client.InstanceFilter{}, fields...)
				}
				if err != nil {
					t.Fatalf("member %s: list: %v", name, err)
				}
				for _, i := range list {
					got[i.Name] = i.IPv4
				}
				return maps.Equal(got, addrs)
			})
		}
	}
	if out := a.cli(ctx, "list"); !strings.Contains(out, addrs["g-b"]) {
		t.Errorf("guestlink list on a does not show g-b's IPv4 %s (owned by b):\n%s", addrs["g-b"], out)
	}

	// Ready declared in the guest on c: a's event stream and every
	// member's view see it.
	gc, err := c.client.Instance(ctx, "g-c")
	if err != nil {
		t.Fatal(err)
	}
	if ans := curlDevlxd(ctx, t, gc.DevlxdSocket, "PATCH", "/1.0", `{"state":"Ready"}`); ans.status != 200 {
		t.Fatalf("PATCH /1.0 Ready in g-c: %d %s", ans.status, ans.body)
	}
	recA.wait(ctx, 0, events.InstanceReady, 1, opTimeout)
	if evs := recA.eventsSince(0); len(evs) == 0 || evs[len(evs)-1].Location != "c" {
		t.Errorf("the instance-ready event of g-c seen on a does not say location c: %+v", evs)
	}
	for name, d := range members {
		d.waitInstance(ctx, "g-c", "Ready seen from "+name, opTimeout, func(i *api.Instance) bool { return i.Status == "Ready" })
	}

	clusterExecFiles(ctx, t, a, b, c, addrA)

	// Two members change g-a's config at once (different keys, and one
	// key both write): the owner applies every change; none is lost.
	var wg sync.WaitGroup
	for _, m := range []string{"b", "c"} {
		d := members[m]
		wg.Go(func() {
			for i := range 15 {
				set := map[string]string{fmt.Sprintf("user.%s-%d", m, i): "v", "user.both": m}
				if _, err := d.client.UpdateConfig(ctx, "g-a", set, nil); err != nil {
					t.Errorf("config set from %s: %v", m, err)
					return
				}
			}
		})
	}
	wg.Wait()
	ga, err := a.client.Instance(ctx, "g-a")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"b", "c"} {
		for i := range 15 {
			if k := fmt.Sprintf("user.%s-%d", m, i); ga.Config[k] != "v" {
				t.Errorf("g-a lost %s (set from member %s)", k, m)
			}
		}
	}
	if v := ga.Config["user.both"]; v != "b" && v != "c" {
		t.Errorf("g-a user.both = %q, want the last writer's value", v)
	}

	// An action on b's guest, asked of a, is done by b.
	if _, err := a.client.SetState(ctx, "g-b", api.InstanceStatePut{Action: "stop", Force: true}); err != nil {
		t.Fatalf("stopping g-b from a: %v", err)
	}
	b.waitInstance(ctx, "g-b", "stopped (on b)", opTimeout, func(i *api.Instance) bool { return i.Status == "Stopped" })
	if _, err := c.client.SetState(ctx, "g-b", api.InstanceStatePut{Action: "start"}); err != nil {
		t.Fatalf("starting g-b from c: %v", err)
	}
	b.waitInstance(ctx, "g-b", "agent connected again", agentTimeout, func(i *api.Instance) bool { return i.Agent.State == api.AgentConnected })

	frozenMember(ctx, t, a, b)

	// b owns an instance: removing it is refused.
	if _, err := a.client.RemoveClusterMember(ctx, "b", false); err == nil || !strings.Contains(err.Error(), "still owns 1 instance") {
		t.Errorf("removing b while it owns g-b: got %v", err)
	}

	// b dies: a sees it offline and its instance Unknown, with the reason;
	// actions on it are refused precisely. Its guest keeps running.
	b.kill()
	a.waitInstance(ctx, "g-b", "Unknown while b is offline", opTimeout, func(i *api.Instance) bool {
		return i.Status == "Unknown" && strings.Contains(i.StatusReason, "member b is offline")
	})
	ms, err := a.client.ClusterMembers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Name == "b" && m.Status != "offline" {
			t.Errorf("b after SIGKILL: status %s, want offline", m.Status)
		}
	}
	_, err = a.client.SetState(ctx, "g-b", api.InstanceStatePut{Action: "stop"})
	var se *client.StatusError
	if !errors.As(err, &se) || se.Code != 503 || !strings.HasPrefix(se.Message, "member b is offline") {
		t.Errorf("stopping g-b while b is offline: got %v, want 503 \"member b is offline ...\"", err)
	}

	// b comes back (same state directory: it is a member already) and
	// recovers its guest, which kept running.
	b.start()
	inst := a.waitInstance(ctx, "g-b", "Running again with its agent", agentTimeout, func(i *api.Instance) bool {
		return i.Status == "Running" && i.Agent.State == api.AgentConnected
	})
	if inst.Boot != 2 {
		t.Errorf("g-b after b restarted: boot %d, want 2 (recovered, not restarted)", inst.Boot)
	}

	// Deleting from one member empties every member's list.
	for _, m := range []string{"a", "b", "c"} {
		if err := c.client.Delete(ctx, "g-"+m, true); err != nil {
			t.Fatalf("deleting g-%s from c: %v", m, err)
		}
	}
	testwait.Until(opTimeout, func() bool {
		list, err := a.client.Instances(ctx, client.InstanceFilter{})
		return err == nil && len(list) == 0
	})

	splitOwnership(ctx, t, url, a, c)
}

// splitOwnership replaces member c while the old daemon still runs: c is
// removed with --force (its instance shows Unknown on a, never vanishes),
// `cluster add c` issues two tokens, a new daemon joins as c with the
// first (the second is revoked), and writes go at once through the old c
// and through a (forwarded to the new c). The old c's are refused with
// 503 naming its lease, every write acknowledged is in the database:
// zero acknowledged writes lost. A name taken on another member is a
// clean 409.
func splitOwnership(ctx context.Context, t *testing.T, url string, a, oldC *daemonProc) {
	t.Helper()
	st := dbtest.Open(t, url)
	if _, err := a.client.Create(ctx, api.InstancesPost{Name: "s-c", Backend: "sim", Target: "c"}); err != nil {
		t.Fatalf("creating s-c on c: %v", err)
	}
	acked := map[string]bool{} // config keys whose write was answered 200
	if _, err := oldC.client.UpdateConfig(ctx, "s-c", map[string]string{"user.before": "v"}, nil); err != nil {
		t.Fatalf("a write on c before its removal: %v", err)
	}
	acked["user.before"] = true

	// A name taken on another member: a clean 409, no driver text.
	_, err := a.client.Create(ctx, api.InstancesPost{Name: "s-c", Backend: "sim", Target: "a"})
	var se *client.StatusError
	if !errors.As(err, &se) || se.Code != 409 || !strings.Contains(se.Message, `instance "s-c" exists already (on cluster member c)`) || strings.Contains(se.Message, "SQLSTATE") {
		t.Errorf("creating s-c on a while c has it: got %v, want a clean 409 naming member c", err)
	}

	out := a.cli(ctx, "cluster", "remove", "c", "--force")
	for _, want := range []string{"Member c removed", "1 instance(s): s-c", "refuses every change"} {
		if !strings.Contains(out, want) {
			t.Errorf("cluster remove c --force does not say %q:\n%s", want, out)
		}
	}
	// The removed member's instance shows Unknown on a, with the reason.
	list, err := a.client.Instances(ctx, client.InstanceFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "s-c" || list[0].Status != "Unknown" || !strings.Contains(list[0].StatusReason, "member c was removed") {
		t.Errorf("a's list after c was removed: %+v, want s-c Unknown \"member c was removed ...\"", list)
	}
	// The old c learns it (a write, or its next heartbeat) and is fenced:
	// its own cluster list says so.
	if !testwait.Until(opTimeout, func() bool {
		ms, err := oldC.client.ClusterMembers(ctx)
		if err != nil {
			return false
		}
		for _, m := range ms {
			if m.Self && m.Status == "fenced" && strings.Contains(m.StatusReason, "member c was removed") {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("the removed c does not list itself fenced; log:\n%s", oldC.logTail(20))
	}
	if !strings.Contains(oldC.log(), "this member's lease is gone") {
		t.Errorf("the removed c does not say in its log that its lease is gone")
	}

	// Two tokens for c; the first joins, the second is revoked by it.
	tok1 := strings.TrimSpace(a.cli(ctx, "cluster", "add", "c"))
	tok2 := strings.TrimSpace(a.cli(ctx, "cluster", "add", "c"))
	newC := newDaemon(t, memberFlags(url, "c", freeAddr(t), "--join", tok1)...)
	if out := refusedStart(ctx, t, memberFlags(url, "c", freeAddr(t), "--join", tok2)...); !strings.Contains(out, "revoked") {
		t.Errorf("c's second token after c joined: want \"revoked\", got:\n%s", out)
	}

	// Writes through the old c and through a (forwarded to the new c), at once.
	const n = 40
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		refused int
	)
	for _, via := range []struct {
		name string
		d    *daemonProc
	}{{"old-c", oldC}, {"a", a}} {
		wg.Go(func() {
			for i := range n {
				key := fmt.Sprintf("user.%s-%d", via.name, i)
				_, err := via.d.client.UpdateConfig(ctx, "s-c", map[string]string{key: "v"}, nil)
				mu.Lock()
				var se *client.StatusError
				switch {
				case err == nil:
					acked[key] = true
				case errors.As(err, &se) && se.Code == 503 && strings.Contains(se.Message, "member c no longer holds its instances"):
					refused++
				default:
					t.Errorf("writing %s through %s: %v", key, via.name, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	rec, err := st.GetInstance(ctx, "s-c")
	if err != nil {
		t.Fatal(err)
	}
	lost := 0
	for key := range acked {
		if rec.Config[key] != "v" {
			lost++
			t.Errorf("acknowledged write %s is not in the database", key)
		}
		if strings.HasPrefix(key, "user.old-c-") {
			t.Errorf("the fenced old c acknowledged %s", key)
		}
	}
	if refused != n || len(acked) != n+1 {
		t.Errorf("old c refused %d of %d writes, %d writes acknowledged; want %d refused, %d acknowledged (a's and the one before)", refused, n, len(acked), n, n+1)
	}
	t.Logf("split ownership: %d writes acknowledged, %d refused by the fenced member, %d acknowledged and lost", len(acked), refused, lost)
	// The new c took s-c over with every write acknowledged before.
	if inst, err := newC.client.Instance(ctx, "s-c"); err != nil || inst.Config["user.before"] != "v" {
		t.Errorf("s-c on the new c: %+v (%v), want user.before=v", inst, err)
	}
	// Both c's stop, and s-c's record goes: its guest's handle names the
	// old c's plugin directory, which the new c's backend refuses to
	// delete (a replaced host's guests are its own: docs/cluster.md).
	for _, d := range []*daemonProc{oldC, newC} {
		if err := d.signal(syscall.SIGTERM, 30*time.Second); err != nil {
			t.Error(err)
		}
	}
	if err := st.DeleteInstance(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
}

// frozenMember freezes b (SIGSTOP) before it is marked offline: a config
// write asked of a is forwarded to b and answered 503 "member b did not
// answer in 2 s" within the forward timeout; b, resumed (SIGCONT), finds
// the request past its deadline, drops it and says so, and the write is
// never applied.
func frozenMember(ctx context.Context, t *testing.T, a, b *daemonProc) {
	t.Helper()
	// The write must reach b's socket while b is frozen, which needs an
	// idle connection from a to b to carry it (a fresh one would hang in
	// its TLS handshake and never carry the request). A forwarded read
	// leaves one, but a's other traffic to b (heartbeats, the view) may
	// take it in the same moment; then the write went out on a new
	// connection, never reached b, and there is nothing for b to drop.
	// Such an attempt proves nothing either way: it is tried again, up to
	// three times, and the test fails if no attempt reaches b.
	for attempt := 1; attempt <= 3; attempt++ {
		key := fmt.Sprintf("user.frozen%d", attempt)
		if frozenWrite(ctx, t, a, b, key) {
			return
		}
		t.Logf("attempt %d: the write forwarded to the frozen b did not reach it (a new connection); trying again", attempt)
	}
	t.Fatal("in 3 attempts, no write forwarded to a frozen b reached it: b never dropped one that arrived after its deadline")
}

// frozenWrite freezes b, sends a config write for g-b to a (forwarded to
// b), checks a answers 503 at the forward timeout, resumes b, and reports
// whether b then dropped the write as arrived after its deadline. Whether
// or not it did, the write must not have been applied.
func frozenWrite(ctx context.Context, t *testing.T, a, b *daemonProc, key string) bool {
	t.Helper()
	if _, err := a.client.Instance(ctx, "g-b"); err != nil {
		t.Fatalf("reading g-b from a: %v", err)
	}
	dropped := "dropped a forwarded request: it arrived after its deadline"
	droppedBefore := strings.Count(b.log(), dropped)
	pid := b.pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resume := sync.OnceFunc(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	defer resume()
	// kill(2) returns before the stop takes: a thread of b still running
	// could read the write and begin it, then freeze inside it and finish
	// it once resumed (a write begun before the freeze, not the one this
	// tests). Send it only once every thread of b is stopped.
	if !testwait.Until(opTimeout, func() bool { return allThreadsStopped(pid) }) {
		t.Fatalf("b (pid %d) did not stop after SIGSTOP", pid)
	}
	start := time.Now()
	_, err := a.client.UpdateConfig(ctx, "g-b", map[string]string{key: "applied"}, nil)
	took := time.Since(start)
	var se *client.StatusError
	if want := "member b did not answer in 2 s"; !errors.As(err, &se) || se.Code != 503 || se.Message != want {
		t.Errorf("a config write forwarded to a frozen b: got %v, want 503 %q", err, want)
	}
	if took < clusterForward || took > clusterForward+time.Second {
		t.Errorf("a config write forwarded to a frozen b was answered after %v, want the forward timeout %v (within 1 s)", took, clusterForward)
	}
	t.Logf("a config write forwarded to the frozen b: answered %v after %v", err, took.Round(time.Millisecond))
	resume()
	reached := testwait.Until(opTimeout/2, func() bool { return strings.Count(b.log(), dropped) > droppedBefore })
	inst, err := b.client.Instance(ctx, "g-b")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := inst.Config[key]; ok {
		t.Errorf("the write whose caller was answered 503 was applied after b resumed: %s=%q; b's log:\n%s\na's log:\n%s", key, v, b.logTail(60), a.logTail(30))
	}
	return reached
}

// allThreadsStopped reports whether every thread of pid is in the stopped
// state (T in /proc/PID/task/TID/stat).
func allThreadsStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		i := bytes.LastIndexByte(data, ')')
		if err != nil || i < 0 || len(data) < i+3 || data[i+2] != 'T' {
			return false
		}
	}
	return true
}

// clusterExecFiles runs exec and file operations on c's guest through the
// other members: a forwards the exec to c and relays its websockets (the
// streams apart and the exit code; a pseudo-terminal's size through the
// control websocket), a file pushed through a is pulled through b with the
// same sha256, and c audits each with the original requestor while a logs
// the forward. A viewer's pull through a is refused by a (403), as on the
// owner: the owner trusts the forwarding member's checks.
func clusterExecFiles(ctx context.Context, t *testing.T, a, b, c *daemonProc, addrA string) {
	t.Helper()
	checkExecStreams(ctx, t, a, "g-c")
	checkExecPTY(ctx, t, a, "g-c")
	dir := t.TempDir()
	src, back := filepath.Join(dir, "src"), filepath.Join(dir, "back")
	sum := writeRandom(t, src, 8<<20)
	a.cli(ctx, "file", "push", "-p", src, "g-c/srv/cluster/blob")
	b.cli(ctx, "file", "pull", "g-c/srv/cluster/blob", back)
	if got := fileSum(t, back); got != sum {
		t.Errorf("a file pushed to g-c through a and pulled through b: sha256 %x, want %x", got, sum)
	}
	// A path that is not there: the owner's 404, relayed as is.
	if _, errOut, err := b.runCLI(ctx, "file", "pull", "g-c/srv/cluster/none", filepath.Join(dir, "none")); err == nil || !strings.Contains(errOut, "no such file or directory") {
		t.Errorf("pulling a missing file of g-c through b: %v %q, want \"no such file or directory\"", err, errOut)
	}
	if _, err := a.client.CreateBearerIdentityWith(ctx, api.IdentitiesBearerPost{Name: "clusterviewer", Role: api.RoleViewer}); err != nil {
		t.Fatal(err)
	}
	tok, err := a.client.IssueToken(ctx, "clusterviewer", "")
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(a.stateDir, "cluster", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "a"}}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addrA+"/1.0/instances/g-c/files?path=/srv/cluster/blob", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok.Token)
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "has the role viewer") {
		t.Errorf("a viewer's pull of g-c's file through a: %d %.200q, want 403 \"... has the role viewer ...\"", res.StatusCode, body)
	}
	for _, m := range []struct {
		name  string
		d     *daemonProc
		wants []string
	}{
		{"a", a, []string{`msg="exec forwarded"`, `member=c`}},
		{"c", c, []string{`msg="exec ended"`, `instance=g-c`, `exit_code=7`, `exit_code=5`, `path=/srv/cluster/blob`}},
	} {
		log := m.d.log()
		for _, w := range m.wants {
			if !strings.Contains(log, w) {
				t.Errorf("the log of member %s does not say %s", m.name, w)
			}
		}
	}
}
