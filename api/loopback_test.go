package api

import "testing"

func TestIsLoopbackHost(t *testing.T) {
	for _, tt := range []struct {
		host string
		want bool
	}{
		{"127.0.0.1", true}, {"127.1.2.3", true}, {"::1", true}, {"[::1]", true},
		{"localhost", true}, {"LOCALHOST", true},
		{"", false}, {"0.0.0.0", false}, {"::", false}, {"[::]", false},
		{"10.0.0.1", false}, {"localhost.example.com", false}, {"example.com", false},
		{"127.0.0.1.nip.io", false},
	} {
		if got := IsLoopbackHost(tt.host); got != tt.want {
			t.Errorf("IsLoopbackHost(%q) = %v, want %v", tt.host, got, tt.want)
		}
	}
	for _, tt := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:7070", true}, {"[::1]:22", true}, {"localhost:1", true},
		{":7070", false}, {"0.0.0.0:7070", false}, {"127.0.0.1", false},
	} {
		if got := IsLoopbackAddr(tt.addr); got != tt.want {
			t.Errorf("IsLoopbackAddr(%q) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}
