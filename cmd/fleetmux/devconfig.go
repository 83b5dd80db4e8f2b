package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/client"
	"github.com/fleetmux/fleetmux/internal/datadir"
	"github.com/fleetmux/fleetmux/trust"
)

// `fleetmux dev` leaves its address and admin token in the user's config
// (DESIGN.md, Trust model), so that the CLI and `fleetmux mcp` find it from any
// directory (client.Resolve says when they use it).

// devConfig is $XDG_CONFIG_HOME/fleetmux/dev.json (client.DevConfigPath).
type devConfig = client.DevConfig

// writeDevConfig writes cfg to devConfigPath (directory 0700, file 0600) and
// returns the path.
func writeDevConfig(cfg devConfig) (string, error) {
	p, err := client.DevConfigPath()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", fmt.Errorf("dev config: %w", err)
	}
	if err := os.Chmod(filepath.Dir(p), 0o700); err != nil {
		return "", fmt.Errorf("dev config: %w", err)
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	if err := writeSecretFile(p, string(b)+"\n"); err != nil {
		return "", fmt.Errorf("dev config: %w", err)
	}
	return p, nil
}

// devToken returns the admin token of `fleetmux dev` kept in <data>/token (0600),
// making it on the first start.
func devToken(data string) (string, error) {
	p := filepath.Join(data, "token")
	if b, err := datadir.ReadFile(p); err == nil { // never through a link
		if t := strings.TrimSpace(string(b)); t != "" {
			if _, err := trust.TokenName(t); err == nil {
				return t, os.Chmod(p, 0o600)
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("dev token: %w", err)
	}
	t, _, err := trust.NewToken("dev", api.RoleAdmin, 0, "fleetmux dev", time.Now())
	if err != nil {
		return "", err
	}
	if err := writeSecretFile(p, t+"\n"); err != nil {
		return "", fmt.Errorf("dev token: %w", err)
	}
	return t, nil
}
