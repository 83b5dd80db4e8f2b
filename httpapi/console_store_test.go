package httpapi

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestConsoleStoreExpiry: a one-time link works once and within LinkTTL; a
// sign-in ends at CookieTTL; the store refuses to grow past its bounds.
func TestConsoleStoreExpiry(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	c := newConsoleStore()
	c.now = func() time.Time { return now }

	code, exp, err := c.newLink("tok")
	if err != nil || !exp.Equal(now.Add(LinkTTL)) {
		t.Fatalf("newLink: %v %v", exp, err)
	}
	late, _, _ := c.newLink("tok")
	if tok, ok := c.useLink(code); !ok || tok != "tok" {
		t.Errorf("a fresh link: %q %v", tok, ok)
	}
	if _, ok := c.useLink(code); ok {
		t.Error("a link worked twice")
	}
	now = now.Add(LinkTTL)
	if _, ok := c.useLink(late); ok {
		t.Error("a link worked after LinkTTL")
	}

	value, cs, aerr := c.add("tok")
	if aerr != nil || cs.csrf == "" || value == cs.csrf {
		t.Fatalf("add: %v %+v", aerr, cs)
	}
	req := func() *http.Request {
		r, _ := http.NewRequest("GET", "/", nil)
		r.AddCookie(&http.Cookie{Name: cookieName, Value: value})
		return r
	}
	if got := c.session(req()); got != cs {
		t.Errorf("session: %+v", got)
	}
	now = now.Add(CookieTTL)
	if got := c.session(req()); got != nil {
		t.Error("a sign-in outlived CookieTTL")
	}

	for i := range maxLinks {
		if _, _, err := c.newLink("tok" + strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := c.newLink("another"); err == nil {
		t.Errorf("more than %d links waiting", maxLinks)
	}
	now = now.Add(LinkTTL)
	if _, _, err := c.newLink("tok"); err != nil {
		t.Errorf("expired links still count: %v", err)
	}
}
