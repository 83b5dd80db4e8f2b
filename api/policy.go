package api

// PolicyInfo is the policy in force (GET, PUT and DELETE /v1/policy): the document
// as it was stored and its version, the FLEETMUX_POLICY revision that every
// decision and audit record names.
type PolicyInfo struct {
	// Version is the stored revision; 0 when no policy is set (everything is
	// allowed).
	Version uint64 `json:"version"`
	// Document is the YAML (or JSON) document as stored; "" when none is set.
	Document string `json:"document"`
	// Rules and Redacts count the document's rules and redact patterns.
	Rules   int `json:"rules"`
	Redacts int `json:"redacts"`
}
