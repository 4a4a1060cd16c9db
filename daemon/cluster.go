package daemon

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/guestlink/guestlink/core/cluster"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/transport/adminapi"
	"github.com/guestlink/guestlink/web"
)

// ClusterConfig configures a daemon's membership of a cluster: daemons
// sharing one PostgreSQL database (docs/cluster.md).
type ClusterConfig struct {
	// Name is this member's name (guestlinkd --name; default the host name).
	Name string
	// Address is HOST:PORT of the cluster listener other members reach
	// this one on (mutual TLS); "" makes a member others cannot reach.
	Address string
	// Join is a one-time join token (guestlink cluster add NAME on a member).
	Join string
	// Heartbeat and OfflineAfter: zero takes core/cluster's defaults.
	Heartbeat, OfflineAfter time.Duration
	// ForwardTimeout bounds a request forwarded to another member; zero
	// takes core/cluster's default.
	ForwardTimeout time.Duration
}

// instanceService is what the API and the dashboard drive: the manager, or
// in a cluster the manager wrapped in the cluster-wide view.
type instanceService interface {
	adminapi.Instances
	web.Instances
}

// openCluster makes the daemon a cluster member when its database is
// PostgreSQL (core/cluster.Open explains refusals).
func (d *Daemon) openCluster(ctx context.Context, url string) error {
	cc := d.cfg.Cluster
	store, ok := d.store.(cluster.Store)
	if !ok {
		return fmt.Errorf("cluster: the store keeps no membership")
	}
	c, err := cluster.Open(ctx, cluster.Config{
		Store:             store,
		Postgres:          strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://"),
		StateDir:          d.cfg.StateDir,
		Name:              cc.Name,
		Address:           cc.Address,
		Join:              cc.Join,
		Version:           Version,
		Backends:          d.backendNames,
		HeartbeatInterval: cc.Heartbeat,
		OfflineAfter:      cc.OfflineAfter,
		ForwardTimeout:    cc.ForwardTimeout,
		Logger:            d.log.With("component", "cluster"),
	})
	if err != nil {
		return err
	}
	if c == nil {
		return nil
	}
	d.cluster = c
	d.clusterCtx, d.stopBeat = context.WithCancel(context.Background())
	go c.Run(d.clusterCtx)
	return nil
}

// clusterEvents makes the bus deliver every member's events in id order:
// from the shared event log, woken by PostgreSQL notifications.
func (d *Daemon) clusterEvents(ctx context.Context, url string) error {
	if d.cluster == nil {
		return nil
	}
	if err := d.bus.StartTail(ctx); err != nil {
		return fmt.Errorf("cluster events: %w", err)
	}
	go db.ListenEvents(d.clusterCtx, url, d.bus.Poke, d.log.With("component", "cluster-events"))
	return nil
}

// backendNames lists the backends of the plugin host (for placement).
func (d *Daemon) backendNames() []string {
	if d.plugins == nil {
		return nil
	}
	var out []string
	for _, b := range d.plugins.List() {
		out = append(out, b.Name)
	}
	return out
}

// clusterName is the member name the manager locates instances on ("" outside a cluster).
func (d *Daemon) clusterName() string {
	if d.cluster == nil {
		return ""
	}
	return d.cluster.Name()
}

// clusterService is the API's view of the membership (nil outside a cluster).
func (d *Daemon) clusterService() adminapi.ClusterService {
	if d.cluster == nil {
		return nil
	}
	return d.cluster
}

// instanceService returns what the API and the dashboard drive.
func (d *Daemon) instanceService() instanceService {
	if d.cluster == nil {
		return d.mgr
	}
	return cluster.NewInstances(d.cluster, d.mgr)
}

// listenCluster serves the admin API to other members on the cluster
// address, over mutual TLS with member certificates.
func (d *Daemon) listenCluster() error {
	if d.cluster == nil || d.cluster.Address() == "" {
		return nil
	}
	ln, err := net.Listen("tcp", d.cluster.Address())
	if err != nil {
		return fmt.Errorf("cluster listener on %s: %w", d.cluster.Address(), err)
	}
	d.clusterLn = d.tcpConns(ln, func(ln net.Listener) net.Listener { return tls.NewListener(ln, d.cluster.ServerTLS()) }, "cluster listener")
	go d.serve("cluster listener", func() error { return d.api.Serve(d.clusterLn) })
	d.log.Info("cluster member", "name", d.cluster.Name(), "address", d.cluster.Address())
	return nil
}
