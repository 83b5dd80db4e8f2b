package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/api"
)

// TestUILink: on `fleetmux dev`, `fleetmux ui` prints a one-time link to the
// console on dev's address; the link's code signs a browser in once, as dev's
// admin token, and the token is nowhere in what ui printed.
func TestUILink(t *testing.T) {
	addr := startDev(t)
	out, errs, err := runArgs(t, "ui")
	if err != nil {
		t.Fatalf("fleetmux ui: %v %s", err, errs)
	}
	m := regexp.MustCompile(`^` + regexp.QuoteMeta(addr) + `/ui/signin#code=([A-Za-z0-9_-]{43})\n\(one use, valid until \d\d:\d\d:\d\d\)\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("fleetmux ui printed %q", out)
	}
	signIn := func() (*http.Response, api.ConsoleMe) {
		req, _ := http.NewRequest("POST", addr+"/ui/signin", strings.NewReader(url.Values{"code": {m[1]}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", addr)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var me api.ConsoleMe
		json.NewDecoder(resp.Body).Decode(&me)
		return resp, me
	}
	resp, me := signIn()
	if resp.StatusCode != http.StatusOK || me.Role != api.RoleAdmin || len(resp.Cookies()) != 1 {
		t.Fatalf("sign-in with the link: %d %+v", resp.StatusCode, me)
	}
	if resp, _ := signIn(); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the link worked twice: %d", resp.StatusCode)
	}
}
