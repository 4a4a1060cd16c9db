package agentmon

import (
	"testing"

	"github.com/guestlink/guestlink/internal/leakcheck"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// monitor, listener and agent connection must end with its test.
func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }
