package sdktest

import (
	"testing"

	"github.com/hashicorp/go-plugin"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// Serve serves b in-process over go-plugin's gRPC transport
// (plugin.TestPluginGRPCConn: a real gRPC server and client on a local
// socket, no child process) and returns the daemon-side sdk.Backend that
// calls it, as Launch would. Errors cross the boundary as gRPC status codes
// and come back with their sdk kinds, exactly as from a plugin process. The
// connection is closed when the test ends.
func Serve(t testing.TB, b sdk.Backend) sdk.Backend {
	t.Helper()
	client, server := plugin.TestPluginGRPCConn(t, false, sdk.PluginSet(b))
	t.Cleanup(func() {
		// The server first: the client's Close asks the server to shut
		// down (go-plugin's controller), and that Stop, running in a gRPC
		// handler, would race with a Stop of our own. Once the server is
		// stopped the request just fails.
		server.Stop()
		_ = client.Close()
	})
	raw, err := client.Dispense(sdk.PluginName)
	if err != nil {
		t.Fatalf("dispensing the in-process backend: %v", err)
	}
	be, ok := raw.(sdk.Backend)
	if !ok {
		t.Fatalf("dispensed %T, not an sdk.Backend", raw)
	}
	return be
}
