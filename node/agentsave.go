package node

import (
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/fleetmux/fleetmux/agent"
	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/datadir"
)

// An agent outlives its node agent as its session does (a holder keeps the
// program): what the tracker needs to know it again is saved beside the
// session's recording, and the next agent tracks it again when it reattaches the
// session. Its state is then read again from its screen.

// agentFile is the file in a session's directory that makes it an agent.
const agentFile = "agent.json"

// maxAgentFile bounds what reattaching reads of an agent file (a generic rule
// file is at most api.MaxRulesBytes).
const maxAgentFile = api.MaxRulesBytes + 64<<10

// savedAgent is an agent file.
type savedAgent struct {
	Agent api.Agent `json:"agent"` // its fixed fields (the state ones are the tracker's)
	Rules string    `json:"rules,omitempty"`
}

// saveAgent writes e's agent file (a failure is logged: the agent runs on, and
// is a bare session after a restart).
func (n *Node) saveAgent(e *entry, meta api.Agent, rules string) {
	b, err := json.Marshal(savedAgent{Agent: meta, Rules: rules})
	if err == nil {
		err = datadir.WriteFile(filepath.Join(e.dir, agentFile), b, 0o600)
	}
	if err != nil {
		n.log.Warn("agent not saved: after a restart it is a session only", "agent", e.id, "err", err)
	}
}

// reattachAgent tracks again the agent of a reattached session, if it was one.
func (n *Node) reattachAgent(e *entry) {
	p := filepath.Join(e.dir, agentFile)
	if fi, err := os.Stat(p); err != nil || fi.Size() > maxAgentFile {
		if err == nil || !os.IsNotExist(err) {
			n.log.Warn("agent file unreadable: the session is no agent now", "session", e.id, "err", err)
		}
		return
	}
	b, err := datadir.ReadFile(p)
	var sa savedAgent
	if err == nil {
		err = json.Unmarshal(b, &sa)
	}
	var d *agent.Driver
	if err == nil {
		d, err = agent.Lookup(sa.Agent.Driver, sa.Rules)
	}
	if err == nil && sa.Agent.ID != e.id {
		err = os.ErrInvalid
	}
	if err == nil {
		err = n.agents.Add(sa.Agent, d, agentSession{e}, "")
	}
	if err != nil {
		n.log.Warn("agent not tracked again: the session is no agent now", "session", e.id, "err", err)
		return
	}
	n.log.Info("agent tracked again", "agent", e.id, "driver", d.Name)
}
