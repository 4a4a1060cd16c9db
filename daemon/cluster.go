package daemon

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/guestlink/guestlink/core/cluster"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/membership"
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
	ms, ok := d.store.(membership.Store)
	if !ok {
		return fmt.Errorf("cluster: the store keeps no membership")
	}
	c, err := cluster.Open(ctx, cluster.Config{
		Store:             clusterStore{Store: ms, db: d.store},
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

// clusterStore is the cluster's store: the database's membership, and the
// instances it records at each member as core/instance views.
type clusterStore struct {
	membership.Store
	db db.Store
}

var _ cluster.Store = clusterStore{}

// StoredInstance returns the recorded view of the instance called name.
func (s clusterStore) StoredInstance(ctx context.Context, name string) (*instance.Instance, error) {
	rec, err := s.db.GetInstance(ctx, name)
	if err != nil {
		return nil, err
	}
	return instance.ViewOfRecord(rec), nil
}

// StoredInstances lists the recorded views of member's instances of backend.
func (s clusterStore) StoredInstances(ctx context.Context, member, backend string) ([]*instance.Instance, error) {
	recs, err := s.db.ListInstances(ctx, db.InstanceFilter{Location: member, Backend: backend})
	if err != nil {
		return nil, err
	}
	out := make([]*instance.Instance, len(recs))
	for i, rec := range recs {
		out[i] = instance.ViewOfRecord(rec)
	}
	return out, nil
}
