package httpapi_test

import (
	"testing"

	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
)

func TestMain(m *testing.M) { testutil.MainWithLeakCheck(m) }

// fixture is the real stack (internal/testutil/stack) with this package's own
// helpers on it (tokens, fan-out, streams).
type fixture struct{ *stack.Stack }

func newFixture(t *testing.T, o stack.Options) *fixture {
	t.Helper()
	return &fixture{stack.New(t, o)}
}
