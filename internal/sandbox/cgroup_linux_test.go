package sandbox

import (
	"path/filepath"
	"strings"
	"testing"
)

// FuzzGroupPath: the group found in /proc/PID/cgroup is the one named for the
// controller (v1) or the unified one (v2), always a clean absolute path, so
// that joined to a hierarchy it stays under it.
func FuzzGroupPath(f *testing.F) {
	v1 := "12:pids:/user.slice\n11:cpu,cpuacct:/a/b\n4:memory:/x/../y\n1:name=systemd:/s\n"
	for _, c := range []struct{ in, controller, want string }{
		{v1, "pids", "/user.slice"},
		{v1, "cpu", "/a/b"},
		{v1, "memory", "/y"},
		{v1, "blkio", ""},
		{"0::/system.slice/fleetmux.service\n", "", "/system.slice/fleetmux.service"},
		{"0::/\n", "", "/"},
		{"0::../../etc\n", "", ""},
		{v1, "", ""},
	} {
		got, ok := groupPath([]byte(c.in), c.controller)
		if got != c.want || ok != (c.want != "") {
			f.Fatalf("groupPath(%q, %q) = %q %v, want %q", c.in, c.controller, got, ok, c.want)
		}
		f.Add([]byte(c.in), c.controller)
	}
	f.Fuzz(func(t *testing.T, b []byte, controller string) {
		if strings.Contains(controller, ",") {
			return // no controller's name holds one
		}
		got, ok := groupPath(b, controller)
		if !ok {
			return
		}
		if !strings.HasPrefix(got, "/") || filepath.Clean(got) != got {
			t.Fatalf("groupPath(%q, %q) = %q", b, controller, got)
		}
		if under := filepath.Join("/sys/fs/cgroup/pids", got); !strings.HasPrefix(under, "/sys/fs/cgroup/pids") {
			t.Fatalf("%q leaves the hierarchy: %s", got, under)
		}
		line := ""
		for _, l := range strings.Split(string(b), "\n") {
			if p := strings.SplitN(l, ":", 3); len(p) == 3 && (controller == "" && p[0] == "0" || controller != "" && strings.Contains(","+p[1]+",", ","+controller+",")) && strings.HasPrefix(p[2], "/") {
				line = p[2]
				break
			}
		}
		if filepath.Clean(line) != got {
			t.Fatalf("groupPath(%q, %q) = %q, not its line's %q", b, controller, got, line)
		}
	})
}
