package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// The coding-agent CLIs the agent tests run, pinned, from npm; .ci/run installs
// these versions (it reads them from these lines).
const (
	ClaudeCodeVersion = "2.1.197" // @anthropic-ai/claude-code
	OpenCodeVersion   = "1.18.33" // opencode-ai
)

// Variables that give the path of a binary to test instead of the pinned one in
// the cache.
const (
	ClaudeCodeEnv = "FLEETMUX_CLAUDE_CODE"
	OpenCodeEnv   = "FLEETMUX_OPENCODE"
)

// NPMPrefix is the npm prefix a pinned CLI is installed into:
// $XDG_CACHE_HOME (else ~/.cache)/fleetmux-test/npm/NAME@VERSION. Call it before a
// test changes HOME.
func NPMPrefix(name, version string) string {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	return filepath.Join(cache, "fleetmux-test", "npm", name+"@"+version)
}

// ClaudeCodePrefix is NPMPrefix of the pinned Claude Code.
func ClaudeCodePrefix() string { return NPMPrefix("claude-code", ClaudeCodeVersion) }

// NeedClaudeCode returns the path of the pinned Claude Code CLI. When it is not
// installed the test is skipped with how to install it, except in CI (CI=true)
// or under FLEETMUX_TEST_STRICT=1, where it fails: .ci/run installs it.
func NeedClaudeCode(t testing.TB) string {
	t.Helper()
	return needNPM(t, ClaudeCodeEnv, ClaudeCodePrefix(), "@anthropic-ai/claude-code@"+ClaudeCodeVersion, "claude")
}

// NeedOpenCode is NeedClaudeCode for the pinned OpenCode.
func NeedOpenCode(t testing.TB) string {
	t.Helper()
	return needNPM(t, OpenCodeEnv, NPMPrefix("opencode-ai", OpenCodeVersion), "opencode-ai@"+OpenCodeVersion, "opencode")
}

func needNPM(t testing.TB, env, prefix, pkg, bin string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	p := filepath.Join(prefix, "node_modules", ".bin", bin)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	msg := pkg + " is not installed at " + p + " (install it: npm install --prefix " + prefix + " " + pkg + ")"
	if os.Getenv("CI") == "true" || Strict() {
		t.Fatalf("missing: %s", msg)
	}
	t.Skipf("skipped: %s", msg)
	return ""
}

// ClaudeCodeEnvFor is the environment that runs Claude Code offline against the
// fake Messages API f, with a fake key and nothing sent anywhere else.
func ClaudeCodeEnvFor(f *FakeClaude) map[string]string {
	return map[string]string{
		"ANTHROPIC_BASE_URL": f.URL, "ANTHROPIC_API_KEY": "sk-ant-fake-0123456789abcdefghij",
		"DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
	}
}

// OpenCodeOffline is the environment that keeps OpenCode from fetching anything at
// start (updates, the models list, plugins, language servers).
func OpenCodeOffline() map[string]string {
	return map[string]string{
		"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
		"OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_SHARE": "1",
	}
}
