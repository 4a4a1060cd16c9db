package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strings"

	"github.com/guestlink/guestlink/agent/probe"
	"github.com/guestlink/guestlink/link/devlxdapi"
)

// kickProbes asks the probe loop to read the probe configuration again
// (the link came up, or a readiness.probe.* key changed).
func (a *Agent) kickProbes() {
	select {
	case a.probeKick <- struct{}{}:
	default:
	}
}

// probeConfigEvent reports whether e changes a readiness.probe.* key.
func probeConfigEvent(e devlxdapi.Event) bool {
	if e.Type != devlxdapi.EventConfig {
		return false
	}
	var ce devlxdapi.ConfigEvent
	return json.Unmarshal(e.Metadata, &ce) == nil && strings.HasPrefix(ce.Key, probe.KeyPrefix)
}

// probeLoop runs the readiness probes the instance's config asks for
// (package probe): it reads readiness.probe.* through devlxd each time it
// is kicked and restarts the probe when they changed.
func (a *Agent) probeLoop(ctx context.Context) {
	var cur map[string]string
	stop := func() {} // stops the running probe and waits for it
	defer func() { stop() }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.probeKick:
		}
		kv, err := a.probeKeys(ctx)
		if err != nil {
			a.log.Warn("reading the probe configuration", "err", err)
			continue
		}
		if maps.Equal(kv, cur) {
			continue
		}
		cfg, err := probe.Parse(kv)
		if err != nil {
			a.log.Warn("ignoring the probe configuration", "err", err)
			continue
		}
		stop()
		stop, cur = func() {}, kv
		if !cfg.Enabled() {
			a.log.Info("no readiness probe")
			continue
		}
		a.log.Info("readiness probe", "config", kv)
		pctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		r := &probe.Runner{Declare: a.declareProbe}
		go func() {
			defer close(done)
			r.Run(pctx, cfg)
		}()
		stop = func() {
			cancel()
			<-done
		}
	}
}

// probeKeys reads the readiness.probe.* keys through devlxd.
func (a *Agent) probeKeys(ctx context.Context) (map[string]string, error) {
	env, err := a.up.Do(ctx, http.MethodGet, "/1.0/config", nil)
	if err != nil {
		return nil, err
	}
	if env.Type == devlxdapi.TypeError {
		return nil, fmt.Errorf("GET /1.0/config: %d %s", env.ErrorCode, env.Error)
	}
	var paths []string
	if err := json.Unmarshal(env.Metadata, &paths); err != nil {
		return nil, fmt.Errorf("decoding GET /1.0/config: %w", err)
	}
	kv := map[string]string{}
	for _, p := range paths {
		key := strings.TrimPrefix(p, "/1.0/config/")
		if !strings.HasPrefix(key, probe.KeyPrefix) {
			continue
		}
		env, err := a.up.Do(ctx, http.MethodGet, "/1.0/config/"+url.PathEscape(key), nil)
		if err != nil {
			return nil, err
		}
		if env.Type == devlxdapi.TypeError {
			continue // unset meanwhile
		}
		var v string
		if err := json.Unmarshal(env.Metadata, &v); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", key, err)
		}
		kv[key] = v
	}
	return kv, nil
}

// declareProbe sends a probe's conclusion as the guest's declaration.
func (a *Agent) declareProbe(ctx context.Context, d probe.Declaration) error {
	body, _ := json.Marshal(devlxdapi.StatePut{State: d.State, Reason: d.Reason, Message: d.Message})
	env, err := a.up.Do(ctx, http.MethodPatch, "/1.0", body)
	if err != nil {
		a.log.Warn("declaring a probe result", "state", d.State, "err", err)
		return err
	}
	if env.Type == devlxdapi.TypeError {
		a.log.Warn("probe result refused", "state", d.State, "code", env.ErrorCode, "error", env.Error)
		return fmt.Errorf("declaring %s: %d %s", d.State, env.ErrorCode, env.Error)
	}
	a.log.Info("probe result declared", "state", d.State, "reason", d.Reason, "message", d.Message)
	a.declared(devlxdapi.StatePut{State: d.State, Reason: d.Reason, Message: d.Message})
	return nil
}
