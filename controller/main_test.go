package controller_test

import (
	"testing"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

func TestMain(m *testing.M) { testutil.MainWithLeakCheck(m) }
