package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"time"

	"github.com/coder/websocket"
	"github.com/spf13/cobra"

	"github.com/fleetmux/fleetmux/client"
)

// envStreamTo is where `fleetmux stream` relays when --to is not given: the URL of
// an asciinema server's producer endpoint carries the stream's secret token, and a
// flag shows in ps.
const envStreamTo = "FLEETMUX_STREAM_TO"

// streamSendTimeout bounds one message to the asciinema server.
const streamSendTimeout = 10 * time.Second

func streamCmd() *cobra.Command {
	var cl clientOptions
	var to string
	c := &cobra.Command{
		Use:   "stream NODE/ID [--to URL]",
		Short: "Relay a session live to an asciinema server",
		Long: "stream relays a session's live stream (GET …/live, asciinema's ALiS protocol: the\n" +
			"current screen, then the output, resizes and the exit status) to an asciinema server's\n" +
			"producer endpoint, a WebSocket URL such as wss://asciinema.example/ws/S/TOKEN, where\n" +
			"anyone with the stream's page watches it. It ends when the session ends (exit 0), or\n" +
			"when either side closes or fails. The URL holds the stream's secret token: give it in\n" +
			"$" + envStreamTo + " rather than --to (flags show in ps).",
		Example: "  FLEETMUX_STREAM_TO=wss://asciinema.example/ws/S/TOKEN fleetmux stream web-1/s3",
		RunE: func(c *cobra.Command, args []string) error {
			node, id, err := needAddress("stream", args)
			if err != nil {
				return err
			}
			if len(args) > 1 {
				return usageError("stream: want one session NODE/ID, got %d arguments", len(args))
			}
			if to == "" {
				to = os.Getenv(envStreamTo)
			}
			u, err := url.Parse(to)
			switch {
			case to == "":
				return usageError("stream: where to? give the asciinema server's WebSocket URL in $%s (or --to)", envStreamTo)
			case err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "":
				return usageError("stream: the destination must be a ws:// or wss:// URL")
			}
			cli, err := cl.client()
			if err != nil {
				return err
			}
			return relayLive(c.Context(), cli, &cl, node, id, u, c.ErrOrStderr())
		},
	}
	cl.register(c, false)
	c.Flags().StringVar(&to, "to", "", "the asciinema server's producer WebSocket `URL` (default $"+envStreamTo+")")
	return c
}

// relayLive copies the session's ALiS stream, message by message, to the server at
// to, then closes both. The server's messages are read (pongs, its close) but not
// relayed: the session is never typed into.
func relayLive(ctx context.Context, cli *client.Client, cl *clientOptions, node, id string, to *url.URL, stderr io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	src, err := cli.Live(ctx, node, id, client.LiveALiS)
	if err != nil {
		return cl.fail(err)
	}
	defer src.CloseNow()
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	dst, _, err := websocket.Dial(dctx, to.String(), &websocket.DialOptions{Subprotocols: []string{client.LiveALiS}})
	dcancel()
	if err != nil {
		return fmt.Errorf("stream: connect to %s: %w", to.Host, err)
	}
	defer dst.CloseNow()
	if dst.Subprotocol() != client.LiveALiS {
		dst.Close(websocket.StatusProtocolError, "v1.alis expected")
		return fmt.Errorf("stream: %s does not speak %s (an asciinema server's producer endpoint does)", to.Host, client.LiveALiS)
	}
	fmt.Fprintf(stderr, "streaming %s/%s to %s (Ctrl-C stops)\n", node, id, to.Host)
	dctx = dst.CloseRead(ctx) // the server's close ends the relay
	for {
		typ, data, err := src.Read(dctx)
		if err != nil {
			if dctx.Err() != nil && ctx.Err() == nil {
				return errors.New("stream: the server closed the stream")
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
				dst.Close(websocket.StatusNormalClosure, "ended")
				fmt.Fprintf(stderr, "%s/%s ended\n", node, id)
				return nil
			}
			dst.Close(websocket.StatusGoingAway, "source lost")
			return fmt.Errorf("stream: the live stream of %s/%s ended: %w", node, id, err)
		}
		wctx, wcancel := context.WithTimeout(dctx, streamSendTimeout)
		err = dst.Write(wctx, typ, data)
		wcancel()
		if err != nil {
			return fmt.Errorf("stream: send to %s: %w", to.Host, err)
		}
	}
}
