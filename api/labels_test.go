package api

import (
	"maps"
	"strconv"
	"strings"
	"testing"
)

func TestParseLabels(t *testing.T) {
	many := make([]string, MaxLabels+1)
	for i := range many {
		many[i] = "k" + strconv.Itoa(i) + "=v"
	}
	tests := []struct {
		in   []string
		want map[string]string
		err  string // substring of the error; "" for none
	}{
		{nil, nil, ""},
		{[]string{"role=web"}, map[string]string{"role": "web"}, ""},
		{[]string{"a=1", "b=x=y", "c=", "a=2"}, map[string]string{"a": "2", "b": "x=y", "c": ""}, ""},
		{[]string{"nokey"}, nil, `label "nokey": want KEY=VALUE`},
		{[]string{"=v"}, nil, `label "=v": label key: api: bad name: empty name`},
		{[]string{"a.b=1"}, nil, `label "a.b=1": label key: api: bad name: name "a.b"`},
		{[]string{"k=a\nb"}, nil, "control character"},
		{[]string{"k=" + strings.Repeat("x", MaxLabelValueBytes+1)}, nil, "over 256 bytes"},
		{many, nil, "33 labels (limit 32)"},
	}
	for _, tt := range tests {
		got, err := ParseLabels(tt.in)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("ParseLabels(%q): %v", tt.in, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("ParseLabels(%q) error %v, want one like %q", tt.in, err, tt.err)
		case !maps.Equal(got, tt.want):
			t.Errorf("ParseLabels(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func FuzzParseLabels(f *testing.F) {
	for _, s := range []string{"role=web", "nokey", "=v", "a.b=1", "k=a\nb", "a=1=2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, kv string) {
		got, err := ParseLabels([]string{kv})
		if err != nil {
			return
		}
		if err := ValidLabels(got); err != nil {
			t.Fatalf("ParseLabels(%q) = %v, which ValidLabels refuses: %v", kv, got, err)
		}
		for k, v := range got {
			if k+"="+v != kv {
				t.Fatalf("ParseLabels(%q) = %v", kv, got)
			}
		}
	})
}
