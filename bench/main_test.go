package bench

import (
	"testing"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

// The drivers' goroutines (the ssh clients' readers, the stacks' own) stop with them.
func TestMain(m *testing.M) { testutil.MainWithLeakCheck(m) }
