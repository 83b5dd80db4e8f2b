package gossip_test

import (
	"testing"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/transport/gossip"
)

func TestMain(m *testing.M) { testutil.MainWithLeakCheck(m) }

// membership mirrors node.Gossip: *Gossip must satisfy it without gossip importing
// node.
type membership interface {
	UpdateMeta(meta api.NodeMeta) error
}

var _ membership = (*gossip.Gossip)(nil)
