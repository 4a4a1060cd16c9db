package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
)

// readyConditionOf returns the Ready condition an event announces, if any.
func readyConditionOf(ev api.Event) (api.Condition, bool) {
	var md struct {
		Context struct {
			Conditions []api.Condition `json:"conditions"`
		} `json:"context"`
	}
	if json.Unmarshal(ev.Metadata, &md) != nil {
		return api.Condition{}, false
	}
	for _, c := range md.Context.Conditions {
		if c.Type == api.ConditionReady {
			return c, true
		}
	}
	return api.Condition{}, false
}

// nextReady waits for the next event announcing a Ready condition that
// satisfies ok.
func nextReady(t *testing.T, evs <-chan api.Event, what string, ok func(api.Condition) bool) api.Condition {
	t.Helper()
	deadline := time.After(qemuBootTimeout) // generous: a QEMU guest boots under TCG
	for {
		select {
		case ev, open := <-evs:
			if !open {
				t.Fatalf("event stream ended waiting for %s", what)
			}
			if c, has := readyConditionOf(ev); has && ok(c) {
				return c
			}
		case <-deadline:
			t.Fatalf("no event: %s", what)
		}
	}
}

// freePort returns a local TCP port nobody listens on (now).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// serveHealth serves 200 on 127.0.0.1:port until the returned function
// closes it.
func serveHealth(t *testing.T, port int) func() {
	t.Helper()
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }),
		ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	stop := func() {
		_ = srv.Close()
		<-done
	}
	t.Cleanup(stop)
	return stop
}

// TestHTTPProbe is the probe Done-when of issue 12: a sim guest with an
// HTTP probe on a port nobody listens on stays Ready=False with a reason
// naming the probe; when a listener appears it becomes Ready; when it goes
// away, Ready is withdrawn; a changed probe key is followed live.
func TestHTTPProbe(t *testing.T) {
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	port := freePort(t)
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", port)
	evs, _ := d.client.Events(ctx, client.EventFilter{Instances: []string{"web1"}})

	d.launch(ctx, "web1", map[string]string{
		"readiness.probe.http":   url,
		"readiness.probe.period": "200ms",
	}, nil)
	c := nextReady(t, evs, "Ready=False ProbeFailed", func(c api.Condition) bool { return c.Reason == "ProbeFailed" })
	if c.Status != api.ConditionFalse || !strings.Contains(c.Message, url) || !strings.Contains(c.Message, "connection refused") {
		t.Fatalf("probe failure: %+v", c)
	}

	stop := serveHealth(t, port)
	c = nextReady(t, evs, "Ready=True", func(c api.Condition) bool { return c.Status == api.ConditionTrue })
	if c.Reason != "ProbeSucceeded" || !strings.Contains(c.Message, url) {
		t.Fatalf("probe success: %+v", c)
	}
	w, err := d.client.Wait(ctx, "web1", api.WaitReady, time.Minute)
	if err != nil || w.Outcome != api.WaitMet {
		t.Fatalf("wait for ready: %+v %v", w, err)
	}

	stop()
	c = nextReady(t, evs, "Ready withdrawn", func(c api.Condition) bool { return c.Status == api.ConditionFalse })
	if c.Reason != "ProbeFailed" {
		t.Fatalf("withdrawn: %+v", c)
	}

	// The agent follows a changed key: a probe on a listening port.
	port2 := freePort(t)
	serveHealth(t, port2)
	url2 := fmt.Sprintf("http://127.0.0.1:%d/", port2)
	if _, err := d.client.UpdateConfig(ctx, "web1", map[string]string{"readiness.probe.http": url2}, nil); err != nil {
		t.Fatal(err)
	}
	c = nextReady(t, evs, "Ready after the key changed", func(c api.Condition) bool { return c.Status == api.ConditionTrue })
	if !strings.Contains(c.Message, url2) {
		t.Fatalf("after the change: %+v", c)
	}
}

// TestProbeKeysValidated checks the host refuses bad probe keys with a
// precise message.
func TestProbeKeysValidated(t *testing.T) {
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := d.client.Create(ctx, api.InstancesPost{Name: "web1", Backend: "sim", Config: map[string]string{"readiness.probe.tcp": "localhost"}})
	if err == nil || !strings.Contains(err.Error(), `invalid value for "readiness.probe.tcp"`) {
		t.Fatalf("bad tcp probe: %v", err)
	}
}

// TestReadinessTimeout: a guest that does not declare Ready within
// readiness.timeout gets Ready=False reason Timeout and an event, through
// the real daemon.
func TestReadinessTimeout(t *testing.T) {
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	evs, _ := d.client.Events(ctx, client.EventFilter{Instances: []string{"web1"}})
	if _, err := d.client.Create(ctx, api.InstancesPost{Name: "web1", Backend: "sim", Start: true,
		Config: map[string]string{"readiness.timeout": "1s"}}); err != nil {
		t.Fatal(err)
	}
	c := nextReady(t, evs, "Ready=False Timeout", func(c api.Condition) bool { return c.Reason == "Timeout" })
	if c.Status != api.ConditionFalse || !strings.Contains(c.Message, "not Ready 1s after start") {
		t.Fatalf("timeout condition %+v", c)
	}
	if _, err := d.client.Create(ctx, api.InstancesPost{Name: "web2", Backend: "sim",
		Config: map[string]string{"readiness.timeout": "forever"}}); err == nil || !strings.Contains(err.Error(), `invalid value for "readiness.timeout"`) {
		t.Fatalf("bad timeout accepted: %v", err)
	}
}

// TestProbeFailureAfterLateReady is the probe half of "conditions say what
// happened" (issue 23), as it was seen: a sim guest whose HTTP probe fails
// past its readiness.timeout (1s) reads Timeout; once its health endpoint
// answers it becomes Ready; when the endpoint goes away again, the
// withdrawn Ready reads ProbeFailed with the probe's message, not
// "Timeout: not Ready 1s after start".
func TestProbeFailureAfterLateReady(t *testing.T) {
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	port := freePort(t)
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", port)
	evs, _ := d.client.Events(ctx, client.EventFilter{Instances: []string{"web1"}})
	d.launch(ctx, "web1", map[string]string{
		"readiness.timeout":      "1s",
		"readiness.probe.http":   url,
		"readiness.probe.period": "200ms",
	}, nil)
	nextReady(t, evs, "Ready=False Timeout", func(c api.Condition) bool { return c.Reason == "Timeout" })
	stop := serveHealth(t, port)
	nextReady(t, evs, "Ready=True", func(c api.Condition) bool { return c.Status == api.ConditionTrue })
	stop()
	c := nextReady(t, evs, "Ready withdrawn", func(c api.Condition) bool { return c.Status == api.ConditionFalse })
	if c.Reason != "ProbeFailed" || !strings.Contains(c.Message, url) {
		t.Fatalf("Ready withdrawn by a failing probe after a late Ready: %+v, want reason ProbeFailed naming %s", c, url)
	}
	inst, err := d.client.Instance(ctx, "web1")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range inst.Conditions {
		if c.Type == api.ConditionReady && c.Reason != "ProbeFailed" {
			t.Fatalf("instance's Ready condition %+v, want ProbeFailed", c)
		}
	}
}
