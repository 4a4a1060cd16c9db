// Command example is the example backend plugin: the whole main of a
// guestlink backend. Build it into the daemon's plugin directory and
// install it with `guestlink backends install`.
package main

import (
	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sdk/example"
)

func main() {
	sdk.Serve(example.New("0.1.0"))
}
