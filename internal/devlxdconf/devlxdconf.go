// Package devlxdconf is the devlxd conformance suite: every route, method,
// status code, content type and body of the untrusted devlxd API (LXD 6.x's
// routes), as a table of requests and the exact answers LXD gives, checked
// against a running server. It runs in two forms:
//   - FormGuest: /dev/lxd/sock as software in the guest sees it (the
//     agent's socket): bare JSON, raw text, plain-text errors;
//   - FormLink: the daemon's devlxd handlers on the guest link, as the agent
//     sees them: every answer in LXD's envelope.
//
// The caller creates one instance with Config and Devices (and one with
// DisabledConfig for RunDisabled), connects a Target to it and calls Run.
// The expected answers are LXD's wire format, never computed by the code
// under test: literals, and the JSON objects of LXD's types built from the
// record of their field order and omitempty in testdata/lxd_types.txt
// (LXDObject). docs/devlxd.md lists the routes and the
// deliberate differences from LXD.
package devlxdconf

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Form is the wire form a Target answers in.
type Form int

// Forms of a Target.
const (
	// FormGuest is /dev/lxd/sock inside the guest (the agent's answers).
	FormGuest Form = iota
	// FormLink is the daemon's devlxd on the guest link (LXD envelopes).
	FormLink
)

// Target is one devlxd server under test.
type Target struct {
	// Form is how it answers.
	Form Form
	// Client sends requests to it; the URL host is ignored by devlxd.
	Client *http.Client
	// Dial opens one raw connection to it (TLS done for FormLink), for the
	// event stream whose bytes are checked before any HTTP parsing.
	Dial func(ctx context.Context) (net.Conn, error)
}

// Guest is what the suite must know of the instance it talks to.
type Guest struct {
	// Name is the instance name (local-hostname).
	Name string
	// InstanceID is its cloud-init instance-id.
	InstanceID string
	// Location is the host name GET /1.0 reports.
	Location string
	// InstanceType is "container" or "virtual-machine".
	InstanceType string
	// StorageDrivers are the host's (local) storage drivers GET /1.0 lists
	// to a guest that may manage volumes (security.devlxd.management.volumes);
	// empty for one that may not.
	StorageDrivers []string
	// SetConfig changes one config key of the instance through the host
	// (for the config event; "" unsets it); nil skips the event check.
	SetConfig func(ctx context.Context, key, value string) error
}

// SSHKey is the public key Config sets for root.
const SSHKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIConformance conf@test"

// Config returns the config the instance under test must have.
func Config() map[string]string {
	return map[string]string{
		"user.foo":                 "bar",
		"user.multi":               "line one\nline two %s %d\n#cloud-config\n",
		"user.meta-data":           "vendor: acme\nregion: \"eu %s\"\n",
		"cloud-init.user-data":     "#cloud-config\nhostname: conformance\n",
		"cloud-init.ssh-keys.root": "root:" + SSHKey,
	}
}

// DisabledConfig returns the config of the instance RunDisabled talks to.
func DisabledConfig() map[string]string {
	return map[string]string{"security.devlxd": "false", "user.foo": "bar"}
}

// Devices returns the devices the instance under test must have.
func Devices() map[string]map[string]string {
	return map[string]map[string]string{
		"eth0": {"type": "nic", "network": "br0", "hwaddr": "00:16:3e:00:00:01"},
		"root": {"type": "disk", "path": "/", "pool": "default"},
	}
}

// Routes is every route of LXD 6.x's devlxd (19) and who serves it in
// guestlink: "untrusted" routes are covered by this suite; "trusted" ones
// (devlxd bearer tokens: instances, operations, storage volumes) are
// tested by daemon's TestDevlxdTrusted and TestQEMUTrustedHotplug
// (docs/devlxd-trusted.md).
var Routes = []struct{ Path, Methods, Kind string }{
	{"/", "GET", "untrusted"},
	{"/1.0", "GET, PATCH", "untrusted"},
	{"/1.0/config", "GET", "untrusted"},
	{"/1.0/config/{key}", "GET", "untrusted"},
	{"/1.0/meta-data", "GET", "untrusted"},
	{"/1.0/events", "GET", "untrusted"},
	{"/1.0/devices", "GET", "untrusted"},
	{"/1.0/images/{fingerprint}/export", "GET", "untrusted"},
	{"/1.0/ubuntu-pro", "GET", "untrusted"},
	{"/1.0/ubuntu-pro/token", "POST", "untrusted"},
	{"/1.0/instances/{name}", "GET, PATCH", "trusted"},
	{"/1.0/operations/{id}", "GET, DELETE", "trusted"},
	{"/1.0/operations/{id}/wait", "GET", "trusted"},
	{"/1.0/storage-pools/{pool}", "GET", "trusted"},
	{"/1.0/storage-pools/{pool}/volumes", "GET, POST", "trusted"},
	{"/1.0/storage-pools/{pool}/volumes/{type}", "GET, POST", "trusted"},
	{"/1.0/storage-pools/{pool}/volumes/{type}/{volume}", "GET, PUT, PATCH, DELETE", "trusted"},
	{"/1.0/storage-pools/{pool}/volumes/{type}/{volume}/snapshots", "GET, POST", "trusted"},
	{"/1.0/storage-pools/{pool}/volumes/{type}/{volume}/snapshots/{snapshot}", "GET, DELETE", "trusted"},
}

// sshUsers is the cloud-config LXD merges the SSH key into the seed data
// with (yaml.v2's rendering; the merged values tagged with a comment).
const sshUsers = "users:\n- name: root\n  ssh-authorized-keys:\n  - " + SSHKey + " #lxd:cloud-init.ssh-keys\n" +
	"  ssh_authorized_keys:\n  - " + SSHKey + " #lxd:cloud-init.ssh-keys\n"

// fingerprint is a well-formed image fingerprint.
const fingerprint = "6d4f0ad7bbf7e1d9d6e3a4c52a2b8f5cf7d0e1b5e0c3d9a2f4b1e8c7a6d5b4c3"

// answer is what a request must get, in form-independent terms.
type answer struct {
	status int
	kind   kind
	value  string // JSON text (kindJSON), raw text (kindRaw) or error message (kindError, kindRelay)
}

type kind int

const (
	kindJSON  kind = iota // success with a JSON value
	kindRaw               // success with raw text
	kindEmpty             // success with no content (PATCH)
	kindError             // an error with a message
	kindRelay             // an error relayed in the main API's envelope in both forms (image export)
	kindHead              // a HEAD answer: the status, no body
)

func okJSON(v string) answer         { return answer{200, kindJSON, v} }
func okRaw(v string) answer          { return answer{200, kindRaw, v} }
func fail(code int, m string) answer { return answer{code, kindError, m} }

// request is one row of the suite.
type request struct {
	name, method, path, body string
	want                     answer
}

// requests returns the table for g, in order (the PATCH rows change the
// ready state and put it back).
func requests(g Guest) []request {
	// GET /1.0 from the record of LXD's field order (lxd_types.txt).
	info := func(state string) string { return Info(g, state) }
	// Where LXD's VM agent (lxd-agent) answers otherwise than its
	// container server (docs/devlxd.md, "Virtual machines").
	notImpl := fail(501, "Not Implemented")
	badBody := func(decoderErr string) answer { return fail(400, "Invalid request body: "+decoderErr) }
	if g.InstanceType == InstanceTypeVM {
		notImpl = fail(501, "") // no text: the guest reads "\n"
		badBody = func(decoderErr string) answer { return fail(500, decoderErr) }
	}
	return []request{
		{"root", "GET", "/", "", okJSON(`["/1.0"]`)},
		{"root HEAD", "HEAD", "/", "", answer{501, kindHead, ""}},
		{"root POST", "POST", "/", "{}", notImpl},
		{"root OPTIONS", "OPTIONS", "/", "", fail(404, `Method "OPTIONS" not found`)},
		{"info", "GET", "/1.0", "", okJSON(info("Started"))},
		{"info HEAD", "HEAD", "/1.0", "", answer{501, kindHead, ""}},
		{"info PUT", "PUT", "/1.0", `{"state":"Ready"}`, notImpl},
		{"info DELETE", "DELETE", "/1.0", "", notImpl},
		{"info OPTIONS", "OPTIONS", "/1.0", "", fail(404, `Method "OPTIONS" not found`)},
		{"state lowercase", "PATCH", "/1.0", `{"state":"ready"}`, fail(400, `Invalid state "ready"`)},
		{"state Running", "PATCH", "/1.0", `{"state":"Running"}`, fail(400, `Invalid state "Running"`)},
		{"state bad JSON", "PATCH", "/1.0", `{"state":`, badBody("unexpected EOF")},
		{"state not a string", "PATCH", "/1.0", `{"state":1}`, badBody("json: cannot unmarshal number into Go struct field DevLXDPut.state of type string")},
		{"state Ready", "PATCH", "/1.0", `{"state":"Ready"}`, answer{200, kindEmpty, ""}},
		{"info Ready", "GET", "/1.0", "", okJSON(info("Ready"))},
		{"state Started", "PATCH", "/1.0", `{"state":"Started"}`, answer{200, kindEmpty, ""}},
		{"info Started again", "GET", "/1.0", "", okJSON(info("Started"))},
		{"config list", "GET", "/1.0/config", "", okJSON(`["/1.0/config/cloud-init.user-data","/1.0/config/user.foo","/1.0/config/user.meta-data","/1.0/config/user.multi","/1.0/config/cloud-init.vendor-data","/1.0/config/user.vendor-data"]`)},
		{"config list POST", "POST", "/1.0/config", "{}", notImpl},
		{"config value", "GET", "/1.0/config/user.foo", "", okRaw("bar")},
		{"config value escaped", "GET", "/1.0/config/user%2efoo", "", okRaw("bar")},
		{"config value byte-exact", "GET", "/1.0/config/user.multi", "", okRaw("line one\nline two %s %d\n#cloud-config\n")},
		{"user-data with ssh keys", "GET", "/1.0/config/cloud-init.user-data", "", okRaw("#cloud-config\nhostname: conformance\n" + sshUsers)},
		{"vendor-data from ssh keys", "GET", "/1.0/config/cloud-init.vendor-data", "", okRaw("#cloud-config\n" + sshUsers)},
		{"old vendor-data from ssh keys", "GET", "/1.0/config/user.vendor-data", "", okRaw("#cloud-config\n" + sshUsers)},
		{"old user-data from ssh keys", "GET", "/1.0/config/user.user-data", "", okRaw("#cloud-config\n" + sshUsers)},
		{"ssh key itself", "GET", "/1.0/config/cloud-init.ssh-keys.root", "", okRaw("root:" + SSHKey)},
		{"config unset", "GET", "/1.0/config/user.nope", "", fail(404, "Not Found")},
		{"config outside user", "GET", "/1.0/config/volatile.uuid", "", fail(403, "Forbidden")},
		{"config outside user unset", "GET", "/1.0/config/security.devlxd", "", fail(403, "Forbidden")},
		{"config value PUT", "PUT", "/1.0/config/user.foo", "x", notImpl},
		{"config value HEAD", "HEAD", "/1.0/config/user.foo", "", answer{501, kindHead, ""}},
		{"meta-data", "GET", "/1.0/meta-data", "", okRaw("instance-id: " + g.InstanceID + "\nlocal-hostname: " + g.Name + "\nvendor: acme\nregion: \"eu %s\"\n")},
		{"meta-data POST", "POST", "/1.0/meta-data", "", notImpl},
		{"devices", "GET", "/1.0/devices", "", okJSON(`{"eth0":{"hwaddr":"00:16:3e:00:00:01","network":"br0","type":"nic"},"root":{"path":"/","pool":"default","type":"disk"}}`)},
		{"devices DELETE", "DELETE", "/1.0/devices", "", notImpl},
		{"events POST", "POST", "/1.0/events", "{}", notImpl},
		{"events PUT", "PUT", "/1.0/events", "{}", notImpl},
		{"events OPTIONS", "OPTIONS", "/1.0/events", "", fail(404, `Method "OPTIONS" not found`)},
		{"image export without security.devlxd.images", "GET", "/1.0/images/" + fingerprint + "/export", "", answer{403, kindRelay, "Forbidden"}},
		{"image export POST", "POST", "/1.0/images/" + fingerprint + "/export", "", notImpl},
		{"ubuntu-pro", "GET", "/1.0/ubuntu-pro", "", okJSON(LXDObject("DevLXDUbuntuProSettings", map[string]string{"guest_attach": `"off"`}))},
		{"ubuntu-pro PUT", "PUT", "/1.0/ubuntu-pro", `{"guest_attach":"on"}`, notImpl},
		{"ubuntu-pro token", "POST", "/1.0/ubuntu-pro/token", "", fail(403, "Failed getting an Ubuntu Pro guest token: Guest attachment not allowed")},
		{"ubuntu-pro token GET", "GET", "/1.0/ubuntu-pro/token", "", notImpl},
		// guestlink's deliberate difference: LXD answers 200 ["/1.0"] here.
		{"unknown path", "GET", "/1.0/nope", "", fail(404, "Not Found")},
		{"trailing slash", "GET", "/1.0/", "", fail(404, "Not Found")},
		{"other version", "GET", "/2.0", "", fail(404, "Not Found")},
	}
}

// guestRequests are answered by the agent itself and never reach the
// daemon (methods an HTTP framework may not even parse).
func guestRequests() []request {
	return []request{
		{"custom method", "PROPFIND", "/1.0", "", fail(404, `Method "PROPFIND" not found`)},
		{"custom method unknown path", "PROPFIND", "/nope", "", fail(404, `Method "PROPFIND" not found`)},
	}
}

// disabledRequests is what a guest with security.devlxd=false gets.
func disabledRequests() []request {
	return []request{
		{"root", "GET", "/", "", fail(403, "Forbidden")},
		{"info", "GET", "/1.0", "", fail(403, "Forbidden")},
		{"state", "PATCH", "/1.0", `{"state":"Ready"}`, fail(403, "Forbidden")},
		{"config", "GET", "/1.0/config/user.foo", "", fail(403, "Forbidden")},
		{"meta-data", "GET", "/1.0/meta-data", "", fail(403, "Forbidden")},
		{"ubuntu-pro", "GET", "/1.0/ubuntu-pro", "", fail(403, "Forbidden")},
		{"image export", "GET", "/1.0/images/" + fingerprint + "/export", "", answer{403, kindRelay, "Forbidden"}},
		{"unknown path", "GET", "/1.0/nope", "", fail(403, "Forbidden")},
		// As LXD, the method is checked before the instance's flag.
		{"POST", "POST", "/1.0", "{}", fail(501, "Not Implemented")},
		{"OPTIONS", "OPTIONS", "/1.0", "", fail(404, `Method "OPTIONS" not found`)},
	}
}

// wire is an exact expected answer.
type wire struct {
	status int
	ctype  string
	body   string
}

// envelope is LXD's success envelope around a JSON value.
func envelope(meta string) string {
	return `{"type":"sync","status":"Success","status_code":200,"operation":"","error_code":0,"error":"","metadata":` + meta + "}\n"
}

// errorEnvelope is LXD's error envelope.
func errorEnvelope(code int, msg string) string {
	m, _ := json.Marshal(msg)
	return fmt.Sprintf(`{"type":"error","status":"","status_code":0,"operation":"","error_code":%d,"error":%s,"metadata":null}`+"\n", code, m)
}

// expected renders a for form f.
func expected(a answer, f Form) wire {
	const js, raw, text = "application/json", "application/octet-stream", "text/plain; charset=utf-8"
	switch a.kind {
	case kindRelay:
		return wire{a.status, js, errorEnvelope(a.status, a.value)}
	case kindHead:
		return wire{a.status, "", ""}
	}
	if f == FormLink {
		switch a.kind {
		case kindJSON:
			return wire{200, js, envelope(a.value)}
		case kindRaw:
			s, _ := json.Marshal(a.value)
			return wire{200, js, envelope(strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(string(s), `\u003c`, "<"), `\u003e`, ">"), `\u0026`, "&"))}
		case kindEmpty:
			return wire{200, js, envelope("null")}
		}
		return wire{a.status, js, errorEnvelope(a.status, a.value)}
	}
	switch a.kind {
	case kindJSON:
		return wire{200, js, a.value + "\n"}
	case kindRaw:
		return wire{200, raw, a.value}
	case kindEmpty:
		return wire{200, raw, ""}
	}
	return wire{a.status, text, a.value + "\n"}
}

// timeout bounds each request (generous: a busy 2-core machine).
const timeout = 30 * time.Second

// Run checks every request of the suite against t.
func Run(t *testing.T, target Target, g Guest) {
	t.Helper()
	check(t, target, requests(g))
	if target.Form == FormGuest {
		check(t, target, guestRequests())
	}
	t.Run("events", func(t *testing.T) { events(t, target, g) })
}

// InstanceTypeVM is Guest.InstanceType of a virtual machine, whose answers
// are LXD's VM agent's.
const InstanceTypeVM = "virtual-machine"

// RunDisabled checks the answers to a container guest whose
// security.devlxd is false (FormLink: the agent removes the socket of such
// a guest).
func RunDisabled(t *testing.T, target Target) {
	t.Helper()
	check(t, target, disabledRequests())
}

func check(t *testing.T, target Target, reqs []request) {
	for _, r := range reqs {
		t.Run(r.name, func(t *testing.T) {
			if err := compare(target, r); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// compare sends r to target and reports how the answer differs from LXD's.
func compare(target Target, r request) error {
	want := expected(r.want, target.Form)
	got, err := do(target, r.method, r.path, r.body)
	if err != nil {
		return err
	}
	if r.want.kind == kindHead {
		got.ctype = ""
	}
	if got != want {
		return fmt.Errorf("%s %s:\n got %d %q %q\nwant %d %q %q", r.method, r.path, got.status, got.ctype, got.body, want.status, want.ctype, want.body)
	}
	return nil
}

func do(target Target, method, path, body string) (wire, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://lxd"+path, rd)
	if err != nil {
		return wire{}, fmt.Errorf("building %s %s: %w", method, path, err)
	}
	if target.Form == FormLink {
		req.URL.Scheme = "https"
	}
	resp, err := target.Client.Do(req)
	if err != nil {
		return wire{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return wire{}, fmt.Errorf("reading %s %s: %w", method, path, err)
	}
	return wire{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}, nil
}

// streamHeader is what LXD writes before its raw event stream.
const streamHeader = "HTTP/1.1 200 OK\nConnection: keep-alive\nContent-Type: application/json\nX-Content-Type-Options: nosniff\n\n"

// events checks GET /1.0/events: on the guest, LXD's raw stream (exact
// header bytes, no chunking), an unknown type accepted, a config event per
// changed user.* key as one JSON line; on the link, the daemon's refusal
// (the agent serves events).
func events(t *testing.T, target Target, g Guest) {
	if target.Form == FormLink {
		want := expected(fail(501, "Events are served by the guest agent"), FormLink)
		got, err := do(target, "GET", "/1.0/events", "")
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("GET /1.0/events on the link:\n got %+v\nwant %+v", got, want)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := target.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(conn, "GET /1.0/events?type=config,no-such-type HTTP/1.1\r\nHost: lxd\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	head := make([]byte, len(streamHeader))
	if _, err := io.ReadFull(br, head); err != nil || string(head) != streamHeader {
		t.Fatalf("event stream header = (%q, %v), want %q", head, err, streamHeader)
	}
	if g.SetConfig == nil {
		return
	}
	// The subscription is made before the header is written: a change now
	// reaches this stream.
	if err := g.SetConfig(ctx, "user.conformance-event", "a <b> & c"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Leave the instance as Config made it ("" unsets).
		if err := g.SetConfig(ctx, "user.conformance-event", ""); err != nil {
			t.Errorf("unsetting user.conformance-event: %v", err)
		}
	}()
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the event: %v (got %q)", err, line)
	}
	var ev struct {
		Type      string          `json:"type"`
		Timestamp string          `json:"timestamp"`
		Metadata  json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(line), &ev); err != nil {
		t.Fatalf("event line %q: %v", line, err)
	}
	if _, err := time.Parse(time.RFC3339Nano, ev.Timestamp); err != nil || ev.Type != "config" {
		t.Fatalf("event %q: type %q, timestamp %q (%v)", line, ev.Type, ev.Timestamp, err)
	}
	// encoding/json's defaults, as LXD: <, > and & escaped.
	wantMeta := `{"key":"user.conformance-event","old_value":"","value":"a \u003cb\u003e \u0026 c"}`
	if string(ev.Metadata) != wantMeta {
		t.Fatalf("event metadata %s, want %s", ev.Metadata, wantMeta)
	}
	wantLine := `{"type":"config","timestamp":"` + ev.Timestamp + `","metadata":` + wantMeta + "}\n"
	if line != wantLine {
		t.Fatalf("event line %q, want %q", line, wantLine)
	}
}
