package api

// Node verbs: the last token of a node API subject (<prefix>.rpc.<node>.<verb>).
// NodeVerbs is their one table: every property of a verb is read from it, never
// from its name.
const (
	VerbCreate    = "create"
	VerbList      = "list"
	VerbGet       = "get"
	VerbUpdate    = "update"
	VerbClose     = "close"
	VerbRun       = "run"
	VerbInput     = "input"
	VerbKeys      = "keys"
	VerbResize    = "resize"
	VerbScreen    = "screen"
	VerbBlocks    = "blocks"
	VerbBlock     = "block"
	VerbRead      = "read"
	VerbWait      = "wait"
	VerbTakeOver  = "take_over"
	VerbApprovals = "approvals"
	VerbApproval  = "approval"
	VerbDecide    = "decide"
	VerbSecretSet = "secret_set"
	VerbSecretLs  = "secret_ls"
	VerbSecretRm  = "secret_rm"

	// The agent verbs (DESIGN "Agents"): an agent is named by its session's id.
	VerbAgentSpawn     = "agent_spawn"
	VerbAgentList      = "agent_list"
	VerbAgentGet       = "agent_get"
	VerbAgentKill      = "agent_kill"
	VerbAgentSend      = "agent_send"
	VerbAgentInterrupt = "agent_interrupt"
	VerbAgentWait      = "agent_wait"
	VerbAgentOutput    = "agent_output"
)

// VerbSpec is what the protocol says of one node verb.
type VerbSpec struct {
	Name string
	// Long: the verb may hold its request up to a timeout the caller chooses (up to
	// MaxWait). Long requests are bounded apart (per principal at the controller, in
	// their own share of the node's slots), so that short verbs always find room,
	// and a caller that leaves cancels them (HeaderCancelID).
	Long bool
	// Mutating: the verb changes a session, the node's approvals or its secrets;
	// the node audits every request of it.
	Mutating bool
	// Role is the least role that may use the verb (each role may do everything
	// the one before it may).
	Role string
}

// NodeVerbs is the node API, one row per verb.
var NodeVerbs = []VerbSpec{
	{Name: VerbCreate, Mutating: true, Role: RoleOperator},
	{Name: VerbList, Role: RoleViewer},
	{Name: VerbGet, Role: RoleViewer},
	{Name: VerbUpdate, Mutating: true, Role: RoleOperator},
	// close: the node lets an operator close only the sessions it created
	// (guard.MayClose); an admin closes any.
	{Name: VerbClose, Mutating: true, Role: RoleOperator},
	{Name: VerbRun, Long: true, Mutating: true, Role: RoleOperator},
	{Name: VerbInput, Mutating: true, Role: RoleOperator},
	{Name: VerbKeys, Mutating: true, Role: RoleOperator},
	{Name: VerbResize, Mutating: true, Role: RoleOperator},
	{Name: VerbScreen, Role: RoleViewer},
	{Name: VerbBlocks, Role: RoleViewer},
	{Name: VerbBlock, Role: RoleViewer},
	{Name: VerbRead, Role: RoleViewer},
	{Name: VerbRecording, Role: RoleViewer},
	{Name: VerbWait, Long: true, Role: RoleViewer},
	{Name: VerbTakeOver, Mutating: true, Role: RoleOperator},
	{Name: VerbApprovals, Role: RoleViewer},
	{Name: VerbApproval, Long: true, Role: RoleViewer}, // waits for a decision
	// decide: the node checks the role against the approval too (admin, or a role
	// its rule names as approver).
	{Name: VerbDecide, Mutating: true, Role: RoleOperator},
	{Name: VerbSecretSet, Mutating: true, Role: RoleAdmin},
	{Name: VerbSecretLs, Role: RoleAdmin},
	{Name: VerbSecretRm, Mutating: true, Role: RoleAdmin},
	{Name: VerbAgentSpawn, Mutating: true, Role: RoleOperator},
	{Name: VerbAgentList, Role: RoleViewer},
	{Name: VerbAgentGet, Role: RoleViewer},
	// agent_kill: as close, the node lets an operator kill only the agents it spawned.
	{Name: VerbAgentKill, Mutating: true, Role: RoleOperator},
	{Name: VerbAgentSend, Mutating: true, Role: RoleOperator},
	{Name: VerbAgentInterrupt, Mutating: true, Role: RoleOperator},
	{Name: VerbAgentWait, Long: true, Role: RoleViewer},
	{Name: VerbAgentOutput, Role: RoleViewer},
	{Name: VerbExec, Long: true, Mutating: true, Role: RoleOperator},
	{Name: VerbExecGet, Role: RoleViewer},
	{Name: VerbExecWait, Long: true, Role: RoleViewer},
	{Name: VerbExecOutput, Role: RoleViewer},
	// exec_kill: the node lets an operator end only the execs it started.
	{Name: VerbExecKill, Mutating: true, Role: RoleOperator},
	{Name: VerbDigestBlocks, Role: RoleViewer},
}

var nodeVerbs = func() map[string]VerbSpec {
	m := make(map[string]VerbSpec, len(NodeVerbs))
	for _, v := range NodeVerbs {
		m[v.Name] = v
	}
	return m
}()

// NodeVerb returns the row of verb in NodeVerbs; ok is false for a verb the node API
// does not have.
func NodeVerb(verb string) (v VerbSpec, ok bool) {
	v, ok = nodeVerbs[verb]
	return v, ok
}

// LongVerb reports whether verb is a node verb that may hold its request up to a
// timeout the caller chooses (VerbSpec.Long).
func LongVerb(verb string) bool { return nodeVerbs[verb].Long }
