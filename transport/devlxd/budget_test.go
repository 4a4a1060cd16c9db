package devlxd

import (
	"testing"

	"github.com/guestlink/guestlink/core/statebudget"
)

// TestPatchStateSharedBudget checks that PATCH /1.0 draws from the budget
// given in Config.StateBudget, shared with the agent monitor's ring words:
// once the other path spent an instance's budget, its PATCH is answered 429
// as for any rate limiting, and other instances keep theirs.
func TestPatchStateSharedBudget(t *testing.T) {
	const burst = 3
	budget := statebudget.New(0.001, burst) // practically no refill within the test
	e := newEnv(t, func(c *Config) { c.StateBudget = budget })
	a := e.client(uuidA, e.agents["a"])
	b := e.client(uuidB, e.agents["b"])
	for range burst {
		if !budget.Allow(uuidA) { // ring words of instance a
			t.Fatal("the budget refused a change within its burst")
		}
	}
	before := len(e.insts.readyCalls())
	if got, want := do(t, a, "PATCH", "/1.0", `{"state":"Ready"}`), fail(429, "Too Many Requests"); got != want {
		t.Fatalf("PATCH after the ring spent the budget: %d %q, want %d %q", got.status, got.body, want.status, want.body)
	}
	if n := len(e.insts.readyCalls()) - before; n != 0 {
		t.Fatalf("SetReady called %d times over the budget", n)
	}
	if got := do(t, b, "PATCH", "/1.0", `{"state":"Ready"}`); got != sync200("null") {
		t.Fatalf("another instance's PATCH: %d %q", got.status, got.body)
	}
}
