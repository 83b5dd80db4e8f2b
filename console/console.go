// Package console is fleetmux's web console: its pages (plain ES modules, HTML and
// CSS, no build step) and the third-party assets vendored beside them at pinned
// versions (vendor.sh, vendor.lock), embedded in the binary. httpapi serves them
// at / and /ui/…; this package only holds and describes the files.
package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"path"
	"sync"
)

//go:embed static
var static embed.FS

// Index is the page every console path that is not an asset answers with (the
// console routes in the browser).
const Index = "index.html"

// File is one embedded file, ready to serve.
type File struct {
	Name string // its path under the console's root, e.g. "app.js"
	Data []byte
	Type string // its Content-Type
	ETag string // a strong ETag: its content's sha256, quoted
}

var (
	once  sync.Once
	files map[string]File
)

// Lookup returns the file at name (a slash-separated path under the console's
// root, no leading slash), or false.
func Lookup(name string) (File, bool) {
	once.Do(load)
	f, ok := files[name]
	return f, ok
}

// Files is the console's files (index.html, the pages' modules, vendor/…).
func Files() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // static is embedded: it exists
	}
	return sub
}

// load reads every embedded file once, with its type and ETag.
func load() {
	files = map[string]File{}
	root := Files()
	fs.WalkDir(root, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(root, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		files[name] = File{Name: name, Data: data, Type: contentType(name), ETag: `"` + hex.EncodeToString(sum[:16]) + `"`}
		return nil
	})
}

// contentType is the Content-Type of a file by its extension; an unknown one is
// served as bytes (with nosniff, never run).
func contentType(name string) string {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js", ".mjs":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".png":
		return "image/png"
	case "":
		return "text/plain; charset=utf-8" // LICENSE
	}
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return "application/octet-stream"
}
