package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	root := t.TempDir()
	mk := func(name string, mode os.FileMode, uid int) string {
		p := filepath.Join(root, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if uid >= 0 {
			if err := os.Chown(p, uid, -1); err != nil {
				t.Skipf("chown needs root: %v", err)
			}
		}
		return p
	}
	tests := []struct {
		name string
		mode os.FileMode
		uid  int
		want string // "" accepted, else a substring of the refusal
	}{
		{"private", 0o700, -1, ""},
		{"readable", 0o755, -1, ""},
		{"world", 0o777, -1, "chmod go-w"},
		{"group", 0o770, -1, "can be written by others (mode 0770)"},
		{"sticky", 0o1777, -1, "can be written by others"},
		{"theirs", 0o700, 65534, "belongs to uid 65534"},
	}
	for _, tt := range tests {
		if tt.uid >= 0 && os.Geteuid() != 0 {
			continue
		}
		err := Check(mk(tt.name, tt.mode, tt.uid))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (!errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want ErrUnsafe with %q", tt.name, err, tt.want)
		}
	}
	// Ensure makes a missing one 0700, and refuses a link where a subdirectory goes.
	d := filepath.Join(root, "new", "data")
	if err := Ensure(d); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(d); st.Mode().Perm() != 0o700 {
		t.Fatalf("made %v", st.Mode())
	}
	if err := os.Symlink(root, filepath.Join(d, "sessions")); err != nil {
		t.Fatal(err)
	}
	if err := Mkdir(filepath.Join(d, "sessions")); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("Mkdir over a link: %v", err)
	}
	if err := Mkdir(filepath.Join(d, "run")); err != nil {
		t.Fatal(err)
	}
}

func TestNoFollow(t *testing.T) {
	d := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(d, "http.url")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(link, []byte("http://evil\n"), 0o600); !errors.Is(err, ErrUnsafe) {
		t.Errorf("WriteFile through a link: %v", err)
	}
	if f, err := OpenFile(link, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); !errors.Is(err, ErrUnsafe) {
		t.Errorf("OpenFile through a link: %v", err)
		f.Close()
	}
	if _, err := ReadFile(link); !errors.Is(err, ErrUnsafe) {
		t.Errorf("ReadFile through a link: %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Fatalf("the victim changed: %q", b)
	}
	// A regular file is replaced whole, with the mode asked, leaving no temporary.
	p := filepath.Join(d, "nats.url")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("new\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := ReadFile(p); string(b) != "new\n" {
		t.Fatalf("read %q", b)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
	if ents, _ := os.ReadDir(d); len(ents) != 2 {
		t.Fatalf("left behind: %v", ents)
	}
	if err := WriteFile(d, nil, 0o600); !errors.Is(err, ErrUnsafe) {
		t.Errorf("WriteFile over a directory: %v", err)
	}
}

func TestCheckPrivate(t *testing.T) {
	d := t.TempDir()
	key := filepath.Join(d, "key")
	if err := os.WriteFile(key, []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckPrivate(key); err != nil {
		t.Fatal(err)
	}
	os.Chmod(key, 0o644)
	if err := CheckPrivate(key); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("0644 key: %v", err)
	}
	os.Chmod(key, 0o600)
	if os.Geteuid() == 0 {
		os.Chown(key, 65534, -1)
		if err := CheckPrivate(key); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "uid 65534") {
			t.Errorf("someone else's key: %v", err)
		}
	}
	link := filepath.Join(d, "link")
	os.Symlink(key, link)
	if err := CheckPrivate(link); !errors.Is(err, ErrUnsafe) {
		t.Errorf("a link: %v", err)
	}
	if err := CheckPrivate(filepath.Join(d, "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
}
