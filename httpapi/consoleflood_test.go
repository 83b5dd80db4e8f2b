package httpapi_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
)

// TestConsoleSignInFlood performs a viewer's attack on the console's sign-ins
// over real HTTP: one viewer token signs in again and again until the store of
// sign-ins is full. Before each token had a share of its own, the store's 4096
// slots were the viewer's for 12 hours and an admin's sign-in was refused
// ("console sign-ins are open"); now a token's oldest sign-in gives way to its
// new one and the admin signs in.
func TestConsoleSignInFlood(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Store: true})
	viewer := f.newToken("flooder", api.RoleViewer, "")
	admin := f.newToken("boss", api.RoleAdmin, "")
	form := url.Values{"token": {viewer}}
	for i := range 4097 {
		resp, data := f.browser(browserReq{method: "POST", path: "/ui/signin", origin: f.Base, form: form})
		if resp.StatusCode != http.StatusOK {
			t.Logf("the viewer's sign-in %d: %d %s", i, resp.StatusCode, data)
			break
		}
	}
	ck, me := f.signIn(admin) // fails the test when refused
	if me.Role != api.RoleAdmin {
		t.Fatalf("signed in as %+v", me)
	}
	if r, b := f.browser(browserReq{method: "GET", path: "/ui/me", cookie: ck}); r.StatusCode != http.StatusOK {
		t.Fatalf("the admin's sign-in: %d %s", r.StatusCode, b)
	}
}

// TestConsoleLinkFlood performs a viewer's attack on one-time sign-in links:
// it asks for links until the controller's 256 waiting links are its own, so
// that `fleetmux ui` fails for everyone for the links' minute, again and
// again. Now a token's oldest waiting link gives way to its new one.
func TestConsoleLinkFlood(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Store: true})
	viewer := f.newToken("flooder", api.RoleViewer, "")
	admin := f.newToken("boss", api.RoleAdmin, "")
	link := func(token string) int {
		req, _ := http.NewRequest("POST", f.Base+"/ui/links", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := f.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for range 257 {
		if link(viewer) != http.StatusOK {
			break
		}
	}
	if code := link(admin); code != http.StatusOK {
		t.Fatalf("the admin's link: %d, want 200", code)
	}
}
