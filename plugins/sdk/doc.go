// Package sdk is what a guestlink backend plugin author imports: the Backend
// interface a plugin implements, Serve to run it as a plugin process, the error
// kinds a plugin returns, and (in sdk/conformance) a test kit that checks any
// plugin binary against the contract. Beside it: sdk/sdktest (a mock Backend
// and an in-process harness), sdk/eventer (the event fan-out with the
// documented drop policy) and sdk/example (a complete backend to copy). The
// SDK is a Go module of its own, github.com/guestlink/guestlink/plugins/sdk,
// tagged plugins/sdk/v0.x.y, and imports nothing of the daemon.
//
// The contract's plain Go types and interfaces live in sdk/contract, which
// imports neither gRPC, the protobuf runtime nor go-plugin: the daemon's
// services use it and link no transport. This package is the contract
// carried over gRPC: Serve and the plugin-side server, Launch and Client
// (the daemon's side), the go-plugin handshake, the protobuf converters and
// the error kinds' gRPC codes. It re-exports every name of sdk/contract
// (contract.go), so sdk.Backend, sdk.Info, sdk.ErrNotFound and the others
// are the very same types and values and a plugin needs only this import.
//
// The daemon drives a Backend through this lifecycle for each guest:
//
//	Create -> Start -> (ReadRing, LinkEndpoint, State)* -> Stop -> (Start ...)* -> Delete
//
// and calls Recover for every stored handle after the daemon or the plugin
// restarted. Guests must outlive the plugin process: a plugin starts each
// guest (its VMM) in a session of its own and keeps everything it needs to
// find it again in the handle.
package sdk
