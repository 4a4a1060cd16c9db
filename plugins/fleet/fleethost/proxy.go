package fleethost

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/guestlink/guestlink/plugins/fleet/fleetbackend"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// GuestsPerHostEnv overrides how many guests one fleet host process holds
// before the next guest goes to another host (default: from the open-file
// limit, see GuestsPerHost).
const GuestsPerHostEnv = "GUESTLINK_FLEET_GUESTS_PER_HOST"

// fdsPerGuest is what one guest may hold in its host at the worst moment:
// the port FIFO, the agent's link and devlxd listeners, the agent's
// connection to the daemon, one from the daemon and one devlxd request.
const fdsPerGuest = 6

// fdReserve is what a host keeps for itself (its socket, the gRPC
// connections, logs, config drives being written).
const fdReserve = 512

// MaxHosts bounds the shards of one data dir.
const MaxHosts = 64

// GuestsPerHost is how many guests one host takes: $GUESTLINK_FLEET_GUESTS_PER_HOST
// when set to a positive number, else what the soft open-file limit allows
// (the hosts inherit it), at least 16.
func GuestsPerHost() int {
	if v, err := strconv.Atoi(os.Getenv(GuestsPerHostEnv)); err == nil && v > 0 {
		return v
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur > 1<<30 {
		return 4096
	}
	return max(16, (int(lim.Cur)-fdReserve)/fdsPerGuest)
}

// ShardDir is the data dir of host k of dataDir: dataDir itself for the
// first, dataDir/s<k> for the others.
func ShardDir(dataDir string, k int) string {
	if k == 0 {
		return dataDir
	}
	return filepath.Join(dataDir, "s"+strconv.Itoa(k))
}

// shard is one host process and the plugin's connection to it.
type shard struct {
	dir       string
	b         sdk.Backend
	conn      io.Closer
	guests    int // guest directories, counted at first use, then kept
	counted   bool
	connected chan struct{} // closed once b is set
}

// Proxy is the plugin process's Backend. The guests are spread over several
// fleet host processes (shards), each with a data dir and open-file limit
// of its own, so that a fleet larger than one process's descriptors can
// hold still runs: a new guest goes to the first host with room
// (GuestsPerHost), every other call to the host that holds the guest (its
// handle's directory says which). Info answers from memory and a host is
// started by the first call that needs it, so a daemon that runs no fleet
// guest never starts one. Events merges the streams of every host
// connected.
type Proxy struct {
	DataDir string // the fleet's data dir (absolute)
	Exe     string // the plugin binary, run as "<Exe> host <shard dir>"
	// PerHost is how many guests one host takes (GuestsPerHost).
	PerHost int

	mu     sync.Mutex
	shards [MaxHosts]*shard
	subs   []*subscriber
}

type subscriber struct {
	ctx context.Context
	out chan sdk.Event
	wg  sync.WaitGroup
}

var _ sdk.Backend = (*Proxy)(nil)

// NewProxy returns a proxy to the hosts of dataDir.
func NewProxy(dataDir, exe string) *Proxy {
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	p := &Proxy{DataDir: dataDir, Exe: exe, PerHost: GuestsPerHost()}
	for k := range p.shards {
		p.shards[k] = &shard{dir: ShardDir(dataDir, k), connected: make(chan struct{})}
	}
	return p
}

// backend returns host k's Backend, starting the host when none answers.
func (p *Proxy) backend(ctx context.Context, k int) (sdk.Backend, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.shards[k]
	if s.b != nil {
		return s.b, nil
	}
	b, conn, err := Connect(ctx, s.dir, p.Exe)
	if err != nil {
		return nil, fmt.Errorf("fleet host %d: %w", k, err)
	}
	s.b, s.conn = b, conn
	close(s.connected)
	for _, sub := range p.subs {
		p.forward(sub, s)
	}
	return b, nil
}

// forward copies s's events to sub until either ends. Called with p.mu
// held and s connected.
func (p *Proxy) forward(sub *subscriber, s *shard) {
	sub.wg.Add(1)
	go func() {
		defer sub.wg.Done()
		in, err := s.b.Events(sub.ctx)
		if err != nil {
			return
		}
		for ev := range in {
			select {
			case sub.out <- ev:
			case <-sub.ctx.Done():
				return
			}
		}
	}()
}

// shardOf names the host holding the guest of h: the shard whose guests
// directory holds the handle's directory. A handle that names none goes to
// the first host, which refuses it as the backend would.
func (p *Proxy) shardOf(h sdk.Handle) int {
	var doc struct {
		Dir string `json:"dir"`
	}
	if json.Unmarshal(h, &doc) != nil {
		return 0
	}
	for k := range p.shards {
		if filepath.Dir(doc.Dir) == filepath.Join(ShardDir(p.DataDir, k), "guests") {
			return k
		}
	}
	return 0
}

// countGuests counts the guest directories of s once (the plugin may start
// after the guests were created); Create and Delete keep the count after.
func countGuests(s *shard) int {
	if !s.counted {
		ents, _ := os.ReadDir(filepath.Join(s.dir, "guests"))
		s.guests, s.counted = 0, true
		for _, e := range ents {
			if e.IsDir() {
				s.guests++
			}
		}
	}
	return s.guests
}

// place picks the host for a new guest: the first with room, else the
// least full.
func (p *Proxy) place() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	best, bestN := 0, -1
	for k, s := range p.shards {
		n := countGuests(s)
		if n < p.PerHost {
			return k
		}
		if bestN < 0 || n < bestN {
			best, bestN = k, n
		}
	}
	return best
}

func (p *Proxy) addGuests(k, d int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	countGuests(p.shards[k])
	p.shards[k].guests = max(0, p.shards[k].guests+d)
}

// Close closes the connections to the hosts.
func (p *Proxy) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []string
	for _, s := range p.shards {
		if s.conn != nil {
			if err := s.conn.Close(); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("closing fleet host connections: %s", strings.Join(errs, "; "))
	}
	return nil
}

// Info describes the backend without asking a host.
func (p *Proxy) Info(ctx context.Context) (*sdk.Info, error) {
	return (&fleetbackend.Backend{}).Info(ctx)
}

// Create makes the guest on the first host with room.
func (p *Proxy) Create(ctx context.Context, spec *sdk.GuestSpec) (sdk.Handle, error) {
	k := p.place()
	b, err := p.backend(ctx, k)
	if err != nil {
		return nil, err
	}
	h, err := b.Create(ctx, spec)
	if err == nil {
		p.addGuests(k, 1)
	}
	return h, err
}

// Start forwards to the guest's host.
func (p *Proxy) Start(ctx context.Context, h sdk.Handle, spec *sdk.GuestSpec) (sdk.Handle, *sdk.GuestState, error) {
	b, err := p.backend(ctx, p.shardOf(h))
	if err != nil {
		return nil, nil, err
	}
	return b.Start(ctx, h, spec)
}

// Stop forwards to the guest's host.
func (p *Proxy) Stop(ctx context.Context, h sdk.Handle, opts sdk.StopOptions) (*sdk.GuestState, error) {
	b, err := p.backend(ctx, p.shardOf(h))
	if err != nil {
		return nil, err
	}
	return b.Stop(ctx, h, opts)
}

// Delete forwards to the guest's host.
func (p *Proxy) Delete(ctx context.Context, h sdk.Handle) error {
	k := p.shardOf(h)
	b, err := p.backend(ctx, k)
	if err != nil {
		return err
	}
	if err := b.Delete(ctx, h); err != nil {
		return err
	}
	p.addGuests(k, -1)
	return nil
}

// State forwards to the guest's host.
func (p *Proxy) State(ctx context.Context, h sdk.Handle) (*sdk.GuestState, error) {
	b, err := p.backend(ctx, p.shardOf(h))
	if err != nil {
		return nil, err
	}
	return b.State(ctx, h)
}

// Events merges the events of every host connected, now or later.
func (p *Proxy) Events(ctx context.Context) (<-chan sdk.Event, error) {
	sub := &subscriber{ctx: ctx, out: make(chan sdk.Event, 64)}
	p.mu.Lock()
	p.subs = append(p.subs, sub)
	for _, s := range p.shards {
		if s.b != nil {
			p.forward(sub, s)
		}
	}
	p.mu.Unlock()
	go func() {
		<-ctx.Done()
		p.mu.Lock()
		for i, x := range p.subs {
			if x == sub {
				p.subs = append(p.subs[:i], p.subs[i+1:]...)
				break
			}
		}
		p.mu.Unlock()
		sub.wg.Wait()
		close(sub.out)
	}()
	return sub.out, nil
}

// ReadRing forwards to the guest's host.
func (p *Proxy) ReadRing(ctx context.Context, h sdk.Handle, max int) ([]byte, error) {
	b, err := p.backend(ctx, p.shardOf(h))
	if err != nil {
		return nil, err
	}
	return b.ReadRing(ctx, h, max)
}

// ReadRings reads a batch in one call per host holding its guests.
func (p *Proxy) ReadRings(ctx context.Context, reads []sdk.RingRead) ([]sdk.RingData, error) {
	out := make([]sdk.RingData, len(reads))
	byShard := map[int][]int{}
	for i, r := range reads {
		k := p.shardOf(r.Handle)
		byShard[k] = append(byShard[k], i)
	}
	// The hosts answer in parallel; each goroutine fills its own slots.
	var wg sync.WaitGroup
	for k, idx := range byShard {
		wg.Go(func() {
			b, err := p.backend(ctx, k)
			if err != nil {
				for _, i := range idx {
					out[i].Err = err
				}
				return
			}
			batch := make([]sdk.RingRead, len(idx))
			for j, i := range idx {
				batch[j] = reads[i]
			}
			for j, r := range sdk.ReadRings(ctx, b, batch) {
				out[idx[j]] = r
			}
		})
	}
	wg.Wait()
	return out, nil
}

var _ sdk.RingBatchReader = (*Proxy)(nil)

// LinkEndpoint forwards to the guest's host.
func (p *Proxy) LinkEndpoint(ctx context.Context, h sdk.Handle) (*sdk.LinkEndpoint, error) {
	b, err := p.backend(ctx, p.shardOf(h))
	if err != nil {
		return nil, err
	}
	return b.LinkEndpoint(ctx, h)
}

// Recover forwards to the guest's host.
func (p *Proxy) Recover(ctx context.Context, h sdk.Handle, spec *sdk.GuestSpec) (sdk.Handle, *sdk.GuestState, error) {
	b, err := p.backend(ctx, p.shardOf(h))
	if err != nil {
		return nil, nil, err
	}
	return b.Recover(ctx, h, spec)
}
