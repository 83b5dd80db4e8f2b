package main

import (
	"context"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fleetmux/fleetmux/client"
	"github.com/fleetmux/fleetmux/mcpserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
)

type mcpOptions struct {
	clientOptions
	maxOutput int
	verbose   bool
}

func mcpCmd() *cobra.Command {
	var o mcpOptions
	c := &cobra.Command{
		Use:   "mcp [--addr URL] [--token T]",
		Short: "Serve MCP (Model Context Protocol) over stdio, for AI agents",
		Long: "mcp is an MCP server on stdin/stdout that drives the fleet through the controller at\n" +
			"--addr: an MCP client (an AI agent) starts it as a subprocess. Its tools list nodes\n" +
			"and sessions, create sessions, run commands (output, exit code, cwd, duration),\n" +
			"wait for them, type into them, read screens and blocks, and fan out; sessions are\n" +
			"resources too (fleetmux://NODE/ID/screen). stdout carries the protocol alone: logs\n" +
			"go to stderr. A controller also serves MCP itself at /mcp (streamable HTTP).\n\n" +
			"MCP client configuration (with fleetmux dev running, mcp finds its address and\n" +
			"token in dev.json; for another controller set FLEETMUX_ADDR and FLEETMUX_TOKEN in\n" +
			"the server's env):\n" +
			"  {\"mcpServers\": {\"fleetmux\": {\"command\": \"fleetmux\", \"args\": [\"mcp\"]}}}",
		Example: "  fleetmux mcp\n  FLEETMUX_ADDR=http://10.0.0.2:7070 FLEETMUX_TOKEN=... fleetmux mcp",
		Args:    exactArgs("mcp", 0, ""),
		RunE: func(c *cobra.Command, _ []string) error {
			if o.maxOutput < 0 {
				return usageError("mcp: --max-output %d: want a positive budget", o.maxOutput)
			}
			actor := "mcp"
			if u := os.Getenv("USER"); u != "" {
				actor += ":" + u
			}
			cfg, err := o.resolve()
			if err != nil {
				return err
			}
			cfg.Actor = actor
			cl, err := client.New(cfg)
			if err != nil {
				return usageError("mcp: --addr: %v", strings.TrimPrefix(err.Error(), "client: "))
			}
			log := newLogger(c.ErrOrStderr(), o.verbose)
			ctx := c.Context()
			hctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			if _, err := cl.Health(hctx); err != nil && ctx.Err() == nil {
				// Serve anyway: the tools say what is wrong, and the controller may come up later.
				log.Warn("the controller does not answer yet; tools will fail until it does", "addr", cl.Addr(), "err", o.fail(err))
			}
			cancel()
			t := &mcp.IOTransport{Reader: readCloser(c.InOrStdin()), Writer: writeCloser(c.OutOrStdout())}
			return mcpserver.Serve(ctx, cl, mcpserver.Options{
				Version: buildVersion(), MaxTextBytes: o.maxOutput, Logger: log,
				// A controller it cannot reach is worded as for the CLI's verbs.
				Unreachable: func(err error) string { return o.fail(err).Error() },
			}, t)
		},
	}
	o.register(c, false)
	c.Flags().IntVar(&o.maxOutput, "max-output", mcpserver.DefaultTextBytes, "default output budget of a tool result in bytes (head + tail)")
	c.Flags().IntVar(&o.maxOutput, "max-output-bytes", mcpserver.DefaultTextBytes, "")
	c.Flags().MarkHidden("max-output-bytes") // its old name, kept for scripts
	c.Flags().BoolVarP(&o.verbose, "verbose", "v", false, "log debug messages (to stderr)")
	return c
}

// readCloser is r as an io.ReadCloser (stdin is one; a test's pipe may not be).
func readCloser(r io.Reader) io.ReadCloser {
	if rc, ok := r.(io.ReadCloser); ok {
		return rc
	}
	return io.NopCloser(r)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// writeCloser is w as an io.WriteCloser.
func writeCloser(w io.Writer) io.WriteCloser {
	if wc, ok := w.(io.WriteCloser); ok {
		return wc
	}
	return nopWriteCloser{w}
}
