package trust

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

func TestTokenRoundTrip(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	text, rec, err := NewToken("ops", api.RoleOperator, time.Hour, "token:root", now)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(text, "fmx1.ops.") || strings.Contains(rec.Hash, text) {
		t.Fatalf("text %q, record %+v", text, rec)
	}
	if name, err := TokenName(text); err != nil || name != "ops" {
		t.Fatalf("TokenName = %q, %v", name, err)
	}
	if err := rec.Check(text, now); err != nil {
		t.Fatalf("Check: %v", err)
	}
	b, _ := EncodeRecord(rec)
	if strings.Contains(string(b), text[len("fmx1.ops."):]) {
		t.Fatalf("the stored record holds the secret: %s", b)
	}
	back, err := DecodeRecord("ops", b)
	if err != nil || back.Check(text, now) != nil {
		t.Fatalf("DecodeRecord: %+v, %v", back, err)
	}
	if _, err := DecodeRecord("other", b); err == nil {
		t.Fatal("a record under another key was accepted")
	}
	for name, tc := range map[string]struct {
		text string
		at   time.Time
	}{
		"expired":      {text, now.Add(time.Hour)},
		"wrong secret": {wrongSecret(text), now},
		"other token":  {mustToken(t, "ops"), now},
		"empty":        {"", now},
	} {
		if err := rec.Check(tc.text, tc.at); !errors.Is(err, ErrTokenInvalid) {
			t.Errorf("%s: Check = %v, want ErrTokenInvalid", name, err)
		}
	}
}

// wrongSecret changes the first character of text's secret: the whole of its
// six bits count (the last characters carry padding bits a decoder may ignore, so
// overwriting them could leave the same secret: 1 run in 1024 did).
func wrongSecret(text string) string {
	i := strings.LastIndexByte(text, '.') + 1
	c := byte('A')
	if text[i] == 'A' {
		c = 'B'
	}
	return text[:i] + string(c) + text[i+1:]
}

func mustToken(t *testing.T, name string) string {
	text, _, err := NewToken(name, api.RoleAdmin, 0, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return text
}

func TestNewTokenRefuses(t *testing.T) {
	for _, tc := range []struct{ name, role string }{
		{"bootstrap", api.RoleAdmin}, {"a.b", api.RoleAdmin}, {"", api.RoleAdmin}, {"x", "root"}, {"x", ""},
	} {
		if _, _, err := NewToken(tc.name, tc.role, 0, "", time.Now()); err == nil {
			t.Errorf("NewToken(%q, %q) succeeded", tc.name, tc.role)
		}
	}
	if _, _, err := NewToken("x", api.RoleViewer, -time.Second, "", time.Now()); err == nil {
		t.Error("negative ttl accepted")
	}
}

func TestTokenNameMalformed(t *testing.T) {
	good := mustToken(t, "n")
	for _, s := range []string{"", "fmx1", "fmx1.", "fmx1.n", "fmx1.n.", "fmx2" + good[4:], "fmx1.a.b." + good[7:],
		"fmx1.n.short", "fmx1.n." + strings.Repeat("A", 44), "fmx1.bad name." + good[7:], "Bearer " + good} {
		if _, err := TokenName(s); !errors.Is(err, ErrTokenFormat) {
			t.Errorf("TokenName(%q) = %v, want ErrTokenFormat", s, err)
		}
	}
}

func TestCheckBootstrap(t *testing.T) {
	if CheckBootstrap("s3cret", "s3cret") != nil || CheckBootstrap("s3cre", "s3cret") == nil || CheckBootstrap("", "") == nil {
		t.Fatal("CheckBootstrap is wrong")
	}
}

func FuzzTokenName(f *testing.F) {
	f.Add("fmx1.ops.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	f.Add("fmx1..")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		name, err := TokenName(s)
		if err != nil {
			return
		}
		if api.ValidName(name) != nil || !strings.HasPrefix(s, "fmx1."+name+".") {
			t.Fatalf("TokenName(%q) = %q", s, name)
		}
	})
}
