package web

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/guestlink/guestlink/internal/leakcheck"
)

// TestMain fails the package if its tests leave goroutines behind.
func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m,
		// fiber's in-memory storage (behind the CSRF and limiter
		// middlewares) runs a gc goroutine per store that nothing stops.
		goleak.IgnoreTopFunction("github.com/gofiber/fiber/v2/internal/memory.(*Storage).gc"),
		// fiber's process-wide timestamp updater, started once.
		goleak.IgnoreAnyFunction("github.com/gofiber/fiber/v2/utils.StartTimeStampUpdater.func1.1"),
	)
}
