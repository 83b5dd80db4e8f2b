package console_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io/fs"
	"os"
	"path"
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/console"
)

// TestVendored: every file under static/vendor is one vendor.lock lists, with the
// sha256 it records (vendor.sh wrote both from the npm tarball whose integrity it
// checked against the registry), and every package in the lock carries an npm
// sha512 integrity. A file edited by hand, added without the script or left
// behind by an old version fails here.
func TestVendored(t *testing.T) {
	lock, err := os.Open("vendor.lock")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	listed := map[string]string{}
	packages := 0
	sc := bufio.NewScanner(lock)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 4 && f[0] == "package":
			packages++
			raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(f[3], "sha512-"))
			if !strings.HasPrefix(f[3], "sha512-") || err != nil || len(raw) != sha512Size {
				t.Errorf("package %s %s: integrity %q is not an npm sha512 integrity", f[1], f[2], f[3])
			}
		case len(f) == 4 && f[0] == "file":
			if _, dup := listed[f[1]]; dup {
				t.Errorf("vendor.lock lists %s twice", f[1])
			}
			listed[f[1]] = f[2]
		default:
			t.Errorf("vendor.lock: line %q is neither a package nor a file", line)
		}
	}
	if packages < 3 || len(listed) == 0 {
		t.Fatalf("vendor.lock lists %d packages and %d files", packages, len(listed))
	}
	root := console.Files()
	seen := map[string]bool{}
	fs.WalkDir(root, "vendor", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if d.IsDir() {
			return nil
		}
		rel := strings.TrimPrefix(name, "vendor/")
		seen[rel] = true
		want, ok := listed[rel]
		if !ok {
			t.Errorf("static/vendor/%s is not in vendor.lock (vendor it with console/vendor.sh)", rel)
			return nil
		}
		data, _ := fs.ReadFile(root, name)
		sum := sha256.Sum256(data)
		if got := hex.EncodeToString(sum[:]); got != want {
			t.Errorf("static/vendor/%s has sha256 %s, vendor.lock records %s: changed after vendoring", rel, got, want)
		}
		return nil
	})
	for rel := range listed {
		if !seen[rel] {
			t.Errorf("vendor.lock lists %s, which static/vendor lacks", rel)
		}
	}
	// What the pages load is embedded and typed for the browser.
	for _, name := range []string{console.Index, "vendor/xterm/xterm.mjs", "vendor/asciinema-player/asciinema-player.min.js"} {
		f, ok := console.Lookup(name)
		if !ok || len(f.Data) == 0 || f.ETag == "" {
			t.Errorf("%s is not embedded", name)
			continue
		}
		if want := map[string]string{".html": "text/html", ".mjs": "text/javascript", ".js": "text/javascript"}[path.Ext(name)]; !strings.HasPrefix(f.Type, want) {
			t.Errorf("%s: type %q, want %s", name, f.Type, want)
		}
	}
}

const sha512Size = 64
