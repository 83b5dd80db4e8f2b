package client_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/client"
	"github.com/fleetmux/fleetmux/internal/testutil"
	fixture "github.com/fleetmux/fleetmux/internal/testutil/stack"
)

// TestE2EApprovals: the Go client against a real stack with a policy: a held run
// is an *Error with the rule and the approval (ErrHeld), Approvals lists it, an
// agent's Decide is refused, an admin's approves it, and Approval waits for the
// run's exit code.
func TestE2EApprovals(t *testing.T) {
	f := fixture.New(t, fixture.Options{Nodes: map[string]map[string]string{"n1": nil}, Store: true, Policy: true})
	ctx := context.Background()
	admin, err := client.New(client.Config{Addr: f.Base, Token: f.Token})
	if err != nil {
		t.Fatal(err)
	}
	f.Must(http.StatusOK, "PUT", "/v1/policy", []byte(`{"version": 1, "rules": [{"name": "needs-a-human", "match": {"command": "needs-ok"}, "action": "approve"}]}`), nil)
	nt, err := admin.CreateToken(ctx, api.TokenRequest{Name: "agent", Role: api.RoleOperator})
	if err != nil {
		t.Fatal(err)
	}
	agent, err := client.New(client.Config{Addr: f.Base, Token: nt.Secret})
	if err != nil {
		t.Fatal(err)
	}
	s := f.NewSession("n1")
	var ce *client.Error
	testutil.Eventually(t, 5*time.Second, func() bool {
		_, err = agent.Run(ctx, "n1", s.ID, api.RunBody{Command: "echo x; : needs-ok; (exit 9)", TimeoutMS: 10000})
		return errors.As(err, &ce) && ce.Code == api.CodeHeld
	}, "the run to be held (%v)", err)
	if !errors.Is(err, client.ErrHeld) || ce.Rule != "needs-a-human" || !strings.HasPrefix(ce.Approval, "n1/a") {
		t.Fatalf("held error %#v", ce)
	}
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Approval != ce.Approval || ae.Rule != ce.Rule {
		t.Fatalf("as an *api.Error: %#v", ae)
	}
	node, id, err := api.ParseApprovalAddr(ce.Approval)
	if err != nil {
		t.Fatal(err)
	}
	list, err := agent.Approvals(ctx, "", "")
	if err != nil || len(list.Approvals) != 1 || list.Approvals[0].Addr() != ce.Approval {
		t.Fatalf("Approvals: %+v %v", list, err)
	}
	if _, err := agent.Decide(ctx, node, id, api.DecideBody{Decision: api.DecisionApprove}); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("the agent's own approval: %v, want forbidden", err)
	}
	if _, err := admin.Decide(ctx, node, id, api.DecideBody{Decision: api.DecisionApprove, Reason: "ok"}); err != nil {
		t.Fatal(err)
	}
	a, err := agent.Approval(ctx, node, id, 20000)
	if err != nil || !a.Done || a.ExitCode == nil || *a.ExitCode != 9 || a.DecidedBy != "token:bootstrap" {
		t.Fatalf("Approval after the run: %+v %v", a, err)
	}
	if _, err := admin.Approval(ctx, node, "s1", 0); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("a bad approval id: %v", err)
	}
}
