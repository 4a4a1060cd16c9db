package fleethost

import (
	"context"
	"io"
	"sync"

	"github.com/guestlink/guestlink/plugins/fleet/fleetbackend"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// Proxy is the plugin process's Backend: Info answers from memory and the
// first call that needs guests connects to the fleet host (starting it),
// so a daemon that runs no fleet guest never starts a host. Events waits
// for that connection and then forwards the host's stream.
type Proxy struct {
	DataDir string // the fleet's data dir
	Exe     string // the plugin binary, run as "<Exe> host <DataDir>"

	mu        sync.Mutex
	b         sdk.Backend
	conn      io.Closer
	connected chan struct{} // closed once b is set
}

var _ sdk.Backend = (*Proxy)(nil)

// NewProxy returns a proxy to the host of dataDir.
func NewProxy(dataDir, exe string) *Proxy {
	return &Proxy{DataDir: dataDir, Exe: exe, connected: make(chan struct{})}
}

func (p *Proxy) backend(ctx context.Context) (sdk.Backend, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.b != nil {
		return p.b, nil
	}
	b, conn, err := Connect(ctx, p.DataDir, p.Exe)
	if err != nil {
		return nil, err
	}
	p.b, p.conn = b, conn
	close(p.connected)
	return b, nil
}

// Close closes the connection to the host, if any.
func (p *Proxy) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		return p.conn.Close()
	}
	return nil
}

// Info describes the backend without asking the host.
func (p *Proxy) Info(ctx context.Context) (*sdk.Info, error) {
	return (&fleetbackend.Backend{}).Info(ctx)
}

// Create forwards to the host.
func (p *Proxy) Create(ctx context.Context, spec *sdk.GuestSpec) (sdk.Handle, error) {
	b, err := p.backend(ctx)
	if err != nil {
		return nil, err
	}
	return b.Create(ctx, spec)
}

// Start forwards to the host.
func (p *Proxy) Start(ctx context.Context, h sdk.Handle, spec *sdk.GuestSpec) (sdk.Handle, *sdk.GuestState, error) {
	b, err := p.backend(ctx)
	if err != nil {
		return nil, nil, err
	}
	return b.Start(ctx, h, spec)
}

// Stop forwards to the host.
func (p *Proxy) Stop(ctx context.Context, h sdk.Handle, opts sdk.StopOptions) (*sdk.GuestState, error) {
	b, err := p.backend(ctx)
	if err != nil {
		return nil, err
	}
	return b.Stop(ctx, h, opts)
}

// Delete forwards to the host.
func (p *Proxy) Delete(ctx context.Context, h sdk.Handle) error {
	b, err := p.backend(ctx)
	if err != nil {
		return err
	}
	return b.Delete(ctx, h)
}

// State forwards to the host.
func (p *Proxy) State(ctx context.Context, h sdk.Handle) (*sdk.GuestState, error) {
	b, err := p.backend(ctx)
	if err != nil {
		return nil, err
	}
	return b.State(ctx, h)
}

// Events streams the host's events once a call has connected to it.
func (p *Proxy) Events(ctx context.Context) (<-chan sdk.Event, error) {
	out := make(chan sdk.Event, 64)
	go func() {
		defer close(out)
		select {
		case <-p.connected:
		case <-ctx.Done():
			return
		}
		p.mu.Lock()
		b := p.b
		p.mu.Unlock()
		in, err := b.Events(ctx)
		if err != nil {
			return
		}
		for ev := range in {
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// ReadRing forwards to the host.
func (p *Proxy) ReadRing(ctx context.Context, h sdk.Handle, max int) ([]byte, error) {
	b, err := p.backend(ctx)
	if err != nil {
		return nil, err
	}
	return b.ReadRing(ctx, h, max)
}

// LinkEndpoint forwards to the host.
func (p *Proxy) LinkEndpoint(ctx context.Context, h sdk.Handle) (*sdk.LinkEndpoint, error) {
	b, err := p.backend(ctx)
	if err != nil {
		return nil, err
	}
	return b.LinkEndpoint(ctx, h)
}

// Recover forwards to the host.
func (p *Proxy) Recover(ctx context.Context, h sdk.Handle, spec *sdk.GuestSpec) (sdk.Handle, *sdk.GuestState, error) {
	b, err := p.backend(ctx)
	if err != nil {
		return nil, nil, err
	}
	return b.Recover(ctx, h, spec)
}
