package main

import (
	"io"
	"strings"
	"testing"
)

// TestReadSecret: from stdin (not a terminal) a secret is one line, its line end
// dropped; what the node could not type as one line is refused, and the error never
// quotes the value.
func TestReadSecret(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		ok       bool
	}{
		{"hunter2\n", "hunter2", true},
		{"hunter2\r\n", "hunter2", true},
		{"hunter2", "hunter2", true},
		{"with spaces & $ymbols\n", "with spaces & $ymbols", true},
		{"", "", false},
		{"\n", "", false},
		{"two\nlines\n", "", false},
		{"tab\there\n", "", false},
		{strings.Repeat("x", 256) + "\n", strings.Repeat("x", 256), true},
		{strings.Repeat("x", 257) + "\n", "", false},
		{strings.Repeat("x", 10000), "", false},
	} {
		got, err := readSecret(strings.NewReader(tt.in), io.Discard, "secret: ")
		if tt.ok != (err == nil) || string(got) != tt.want {
			t.Errorf("readSecret(%.20q) = %.20q, %v; want %.20q (ok %v)", tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil && len(tt.in) > 4 && strings.Contains(err.Error(), strings.TrimSpace(tt.in)) {
			t.Errorf("the error quotes the secret: %v", err)
		}
	}
}
