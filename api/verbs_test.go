package api

import "testing"

// Every verb is in the table once, with a role that exists (a verb without one
// would be open to every caller).
func TestNodeVerbs(t *testing.T) {
	seen := map[string]bool{}
	for _, v := range NodeVerbs {
		if seen[v.Name] {
			t.Errorf("verb %q twice", v.Name)
		}
		seen[v.Name] = true
		if roleRank(v.Role) == 0 {
			t.Errorf("verb %q: least role %q is no role", v.Name, v.Role)
		}
		if ValidName(v.Name) != nil {
			t.Errorf("verb %q is no subject token", v.Name)
		}
		if got, ok := NodeVerb(v.Name); !ok || got != v {
			t.Errorf("NodeVerb(%q) = %+v, %v", v.Name, got, ok)
		}
	}
	for _, long := range []string{VerbRun, VerbWait, VerbApproval} {
		if !LongVerb(long) {
			t.Errorf("%s is not long", long)
		}
	}
	if LongVerb(VerbGet) || LongVerb("no-such-verb") {
		t.Error("a short or unknown verb is long")
	}
}
