package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// ClaudeCodeVersion is the Claude Code (npm @anthropic-ai/claude-code) the agent
// tests run, pinned; .ci/run installs this version (it reads it from this line).
const ClaudeCodeVersion = "2.1.197"

// ClaudeCodeEnv names a variable that gives the path of a claude binary to test
// instead of the pinned one in the cache.
const ClaudeCodeEnv = "FLEETMUX_CLAUDE_CODE"

// ClaudeCodePrefix is the npm prefix the pinned Claude Code is installed into:
// $XDG_CACHE_HOME (else ~/.cache)/fleetmux-test/npm/claude-code@VERSION. Call it
// before a test changes HOME.
func ClaudeCodePrefix() string {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	return filepath.Join(cache, "fleetmux-test", "npm", "claude-code@"+ClaudeCodeVersion)
}

// NeedClaudeCode returns the path of the pinned Claude Code CLI. When it is not
// installed the test is skipped with how to install it, except in CI (CI=true)
// or under FLEETMUX_TEST_STRICT=1, where it fails: .ci/run installs it.
func NeedClaudeCode(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(ClaudeCodeEnv); p != "" {
		return p
	}
	p := filepath.Join(ClaudeCodePrefix(), "node_modules", ".bin", "claude")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	msg := "Claude Code " + ClaudeCodeVersion + " is not installed at " + p +
		" (install it: npm install --prefix " + ClaudeCodePrefix() + " @anthropic-ai/claude-code@" + ClaudeCodeVersion + ")"
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
