package devlxd

import (
	"testing"

	"github.com/guestlink/guestlink/internal/leakcheck"
)

// TestMain fails the package if its tests leave goroutines behind.
func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }
