package exec_test

import (
	"testing"

	"github.com/guestlink/guestlink/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }
