package main

import (
	"context"
	"os"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sdk/example"
)

// backend is the example backend with the behaviour file applied before
// every call.
type backend struct {
	*example.Backend
	instanceType string // Info's InstanceType when set
}

var _ sdk.Backend = (*backend)(nil)

// misbehave applies the behaviour file to a call of method.
func misbehave(method string) {
	b := readBehaviour()
	if b.CrashOn == method {
		sdk.Logger().Error("crashing as asked", "method", method)
		os.Exit(5)
	}
	if b.HangOn == method {
		sdk.Logger().Warn("hanging as asked", "method", method)
		select {}
	}
}

func (b *backend) Info(ctx context.Context) (*sdk.Info, error) {
	misbehave("Info")
	info, err := b.Backend.Info(ctx)
	if err != nil {
		return nil, err
	}
	info.Name = "misbehaving"
	if b.instanceType != "" {
		info.InstanceType = b.instanceType
	}
	info.Missing = readBehaviour().Missing
	return info, nil
}

func (b *backend) Create(ctx context.Context, spec *sdk.GuestSpec) (sdk.Handle, error) {
	misbehave("Create")
	return b.Backend.Create(ctx, spec)
}

func (b *backend) Start(ctx context.Context, h sdk.Handle, spec *sdk.GuestSpec) (sdk.Handle, *sdk.GuestState, error) {
	misbehave("Start")
	return b.Backend.Start(ctx, h, spec)
}

func (b *backend) Stop(ctx context.Context, h sdk.Handle, opts sdk.StopOptions) (*sdk.GuestState, error) {
	misbehave("Stop")
	return b.Backend.Stop(ctx, h, opts)
}

func (b *backend) Delete(ctx context.Context, h sdk.Handle) error {
	misbehave("Delete")
	return b.Backend.Delete(ctx, h)
}

func (b *backend) State(ctx context.Context, h sdk.Handle) (*sdk.GuestState, error) {
	misbehave("State")
	return b.Backend.State(ctx, h)
}

func (b *backend) Events(ctx context.Context) (<-chan sdk.Event, error) {
	misbehave("Events")
	events, err := b.Backend.Events(ctx)
	every := duration(readBehaviour().EventEvery)
	if err != nil || every <= 0 {
		return events, err
	}
	// A chatty plugin: the example's events and one of its own every
	// period, as a plugin whose guests heartbeat.
	out := make(chan sdk.Event)
	go func() {
		defer close(out)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			var ev sdk.Event
			select {
			case e, ok := <-events:
				if !ok {
					return
				}
				ev = e
			case <-tick.C:
				ev = sdk.Event{UUID: "chatty", Kind: sdk.EventRingData, Time: time.Now()}
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func (b *backend) ReadRing(ctx context.Context, h sdk.Handle, max int) ([]byte, error) {
	misbehave("ReadRing")
	return b.Backend.ReadRing(ctx, h, max)
}

func (b *backend) LinkEndpoint(ctx context.Context, h sdk.Handle) (*sdk.LinkEndpoint, error) {
	misbehave("LinkEndpoint")
	ep, err := b.Backend.LinkEndpoint(ctx, h)
	if k := readBehaviour().LinkKind; err == nil && k != "" {
		ep.Kind = sdk.LinkKind(k)
	}
	return ep, err
}

func (b *backend) Recover(ctx context.Context, h sdk.Handle, spec *sdk.GuestSpec) (sdk.Handle, *sdk.GuestState, error) {
	misbehave("Recover")
	return b.Backend.Recover(ctx, h, spec)
}
