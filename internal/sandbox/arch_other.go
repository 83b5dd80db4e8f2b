//go:build linux && !amd64 && !arm64

package sandbox

const auditArch = 0
