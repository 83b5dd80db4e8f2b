package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/charmbracelet/x/vt"
	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/replay"
	"github.com/spf13/cobra"
)

// replayOptions are the flags of `fleetmux replay`.
type replayOptions struct {
	speed     float64
	fromBlock int
	at        time.Duration
	maxIdle   time.Duration
	screen    bool
	resize    bool
	export    string // "", "v3" or "v2": write the recording out instead of playing
	// which of --from-block and --at were given
	blockSet, atSet bool
	cl              clientOptions // for NODE/ID
}

// The largest terminal --screen emulates (a recording may claim up to 10000x10000).
const maxScreenCols, maxScreenRows = 2000, 1000

func replayCmd() *cobra.Command {
	var o replayOptions
	c := &cobra.Command{
		Use:   "replay FILE|NODE/ID [--speed 2] [--from-block N | --at 90s] [--max-idle 2s] [--screen] [--export v2]",
		Short: "Play a session recording in the terminal, or print its screen at a point",
		Long: "replay plays an asciicast recording (v3 as the node agent records every session, or\n" +
			"v2) on stdout with its original timing, scaled by --speed, with pauses capped at\n" +
			"--max-idle. The recording is a FILE (NAME.cast) or a session's, NODE/ID, fetched\n" +
			"through the controller (GET /v1/sessions/NODE/ID/recording). --from-block N starts\n" +
			"at the output of block N (from the block index NAME.blocks.jsonl next to a file, or\n" +
			"the session's blocks) and --at starts at a time; what comes before is shown at once.\n\n" +
			"--screen prints the screen as it was at that point (the end by default) as text,\n" +
			"trailing spaces and empty rows removed, instead of playing. --export v2 writes the\n" +
			"recording to stdout as asciicast v2 (what asciinema 2.2 reads), --export v3 as v3.",
		Example: "  fleetmux replay web-1/s3\n" +
			"  fleetmux replay --speed 4 --from-block 12 web-1-s3.cast\n" +
			"  fleetmux replay --screen --at 1m30s web-1-s3.cast\n" +
			"  fleetmux replay --export v2 web-1/s3 > s3.cast && asciinema play s3.cast",
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError("replay: want one recording FILE or session NODE/ID, got %d arguments (see fleetmux replay --help)", len(args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			o.blockSet, o.atSet = c.Flags().Changed("from-block"), c.Flags().Changed("at")
			if err := o.validate(); err != nil {
				return err
			}
			return o.run(c.Context(), args[0], c.OutOrStdout())
		},
	}
	f := c.Flags()
	f.Float64Var(&o.speed, "speed", 1, "playback speed: 2 plays twice as fast")
	f.IntVar(&o.fromBlock, "from-block", 0, "start at the output of block `N` (needs the block index)")
	f.DurationVar(&o.at, "at", 0, "start at this `time` into the recording, e.g. 90s or 1m30s")
	f.DurationVar(&o.maxIdle, "max-idle", replay.DefaultMaxIdle, "cap each pause at this long (0: the default 2s; negative: no cap)")
	f.BoolVar(&o.screen, "screen", false, "print the screen at the point (--at, --from-block, or the end) instead of playing")
	f.BoolVar(&o.resize, "resize", false, "resize the terminal window when the recording does (xterm CSI 8 t)")
	f.StringVar(&o.export, "export", "", "write the recording to stdout as asciicast `v3` or v2 instead of playing it")
	o.cl.register(c, false)
	return c
}

func (o *replayOptions) validate() error {
	switch {
	case !(o.speed > 0) || math.IsInf(o.speed, 0):
		return usageError("replay: --speed %v: want a positive number, e.g. 2", o.speed)
	case o.blockSet && o.atSet:
		return usageError("replay: give --from-block or --at, not both")
	case o.blockSet && o.fromBlock < 1:
		return usageError("replay: --from-block %d: blocks are numbered from 1", o.fromBlock)
	case o.export != "" && o.export != "v2" && o.export != "v3":
		return usageError("replay: --export %q: want v3 or v2", o.export)
	case o.export != "" && (o.blockSet || o.atSet || o.screen):
		return usageError("replay: --export writes the whole recording: not with --from-block, --at or --screen")
	case o.at < 0:
		return usageError("replay: --at %v: want a time into the recording, e.g. 90s", o.at)
	}
	return nil
}

func (o *replayOptions) run(ctx context.Context, arg string, stdout io.Writer) error {
	file := arg
	if _, err := os.Stat(arg); err != nil && strings.Contains(arg, "/") {
		if node, id, aerr := api.ParseAddress(arg); aerr == nil {
			if o.export != "" {
				return o.exportSession(ctx, node, id, stdout)
			}
			dir, err := os.MkdirTemp("", "fleetmux-replay-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			if file, err = o.fetch(ctx, node, id, dir); err != nil {
				return err
			}
		}
	}
	if o.export != "" {
		return exportFile(file, o.export, stdout)
	}
	rec, err := replay.Open(file)
	if err != nil {
		return err
	}
	defer rec.Close()
	pos, err := o.position(rec)
	if err != nil {
		return err
	}
	if o.screen {
		err = printScreen(ctx, rec, pos, stdout)
	} else {
		p := replay.Player{Speed: o.speed, MaxIdle: o.maxIdle, From: pos, Resize: o.resize}
		err = p.Play(ctx, rec, stdout)
	}
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		if !o.screen {
			_, _ = io.WriteString(stdout, "\x1b[0m\r\n") // leave the terminal's colours as they were
		}
		return &exitError{code: 130, err: errors.New("replay: interrupted")}
	}
	return err
}

// position is where --from-block or --at point, the end for --screen without them, and
// the start otherwise.
func (o *replayOptions) position(rec *replay.Recording) (replay.Position, error) {
	switch {
	case o.blockSet:
		return rec.AtBlock(o.fromBlock)
	case o.atSet:
		return rec.AtTime(o.at)
	case o.screen:
		return rec.AtOffset(rec.End())
	}
	return replay.Position{}, nil
}

// screenTerm is the emulator --screen feeds, refusing sizes too large to emulate.
type screenTerm struct {
	*vt.Emulator
	err error
}

func (s *screenTerm) Resize(cols, rows int) {
	if cols > maxScreenCols || rows > maxScreenRows {
		s.err = fmt.Errorf("replay: the recording resizes to %dx%d, more than --screen emulates (%dx%d)", cols, rows, maxScreenCols, maxScreenRows)
		return
	}
	s.Emulator.Resize(cols, rows)
}

// Write feeds the emulator unless a resize was refused.
func (s *screenTerm) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	return s.Emulator.Write(p)
}

// printScreen renders the recording up to pos in a terminal emulator and prints its
// rows, trailing spaces and trailing empty rows removed.
func printScreen(ctx context.Context, rec *replay.Recording, pos replay.Position, w io.Writer) error {
	h := rec.Header()
	if h.Width > maxScreenCols || h.Height > maxScreenRows {
		return fmt.Errorf("replay: the recording's terminal is %dx%d, more than --screen emulates (%dx%d)", h.Width, h.Height, maxScreenCols, maxScreenRows)
	}
	emu := vt.NewEmulator(h.Width, h.Height)
	// The emulator answers a program's queries (cursor position, colours) on its reply
	// pipe and blocks in Write until someone reads them: drain them. Closing the pipe's
	// write side ends the drain; Emulator.Close would race with the Read.
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		_, _ = io.Copy(io.Discard, emu)
	}()
	defer func() {
		if pw, ok := emu.InputPipe().(*io.PipeWriter); ok {
			_ = pw.CloseWithError(io.EOF)
		} else {
			_ = emu.Close()
		}
		<-drained
	}()
	term := &screenTerm{Emulator: emu}
	if err := rec.ScreenAt(ctx, pos, term); err != nil {
		if term.err != nil {
			return term.err
		}
		return err
	}
	_, err := io.WriteString(w, screenText(emu))
	return err
}

// screenText is the emulator's screen, one line per row, trailing spaces and trailing
// empty rows removed.
func screenText(emu *vt.Emulator) string {
	rows := make([]string, emu.Height())
	var b strings.Builder
	for y := range rows {
		b.Reset()
		spaces := 0
		for x := 0; x < emu.Width(); x++ {
			c := emu.CellAt(x, y)
			switch {
			case c == nil || c.Content == "" && !c.IsZero() || c.Content == " ":
				spaces++
			case c.IsZero(): // the second half of a wide character
			default:
				b.WriteString(strings.Repeat(" ", spaces))
				spaces = 0
				b.WriteString(c.Content)
			}
		}
		rows[y] = b.String()
	}
	for len(rows) > 0 && rows[len(rows)-1] == "" {
		rows = rows[:len(rows)-1]
	}
	if len(rows) == 0 {
		return ""
	}
	return strings.Join(rows, "\n") + "\n"
}

// fetch writes the recording of session node/id (v3) and its block index, made from
// the session's blocks, to dir (the caller's, private), and returns the recording's
// path.
func (o *replayOptions) fetch(ctx context.Context, node, id, dir string) (string, error) {
	cl, err := o.cl.client()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, node+"-"+id+".cast")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := cl.Recording(ctx, node, id, api.RecordingV3, f); err != nil {
		return "", o.cl.fail(err)
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	if !o.blockSet {
		return path, nil
	}
	// The block index, from the recording's markers: each sits at its block's first
	// output byte (also for a closed session, whose blocks the API no longer lists).
	rec, err := replay.Open(path)
	if err != nil {
		return "", err
	}
	defer rec.Close()
	var entries []replay.IndexEntry
	err = rec.Events(ctx, replay.Position{}, func(e replay.Event) error {
		if n, cmd, exit, ok := replay.MarkerBlock(e.Data); ok && e.Kind == "m" {
			off := rec.Header().Offset + e.Offset
			entries = append(entries, replay.IndexEntry{N: n, Command: cmd, ExitCode: exit, Start: off, End: off})
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	idx, err := os.OpenFile(replay.IndexPath(path), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", err
	}
	defer idx.Close()
	iw := replay.NewIndexWriter(idx)
	for _, e := range entries {
		if err := iw.Append(e); err != nil {
			return "", err
		}
	}
	return path, idx.Close()
}

// exportSession writes the recording of session node/id to w in o.export's version.
func (o *replayOptions) exportSession(ctx context.Context, node, id string, w io.Writer) error {
	cl, err := o.cl.client()
	if err != nil {
		return err
	}
	format := api.RecordingV3
	if o.export == "v2" {
		format = api.RecordingV2
	}
	if err := cl.Recording(ctx, node, id, format, w); err != nil {
		return o.cl.fail(err)
	}
	return nil
}

// exportFile writes the recording in file to w as asciicast version ("v3" or "v2"),
// each block's marker with its exit code when the block index has it.
func exportFile(file, version string, w io.Writer) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	defer f.Close()
	var label func(string) string
	if idx, err := replay.OpenIndex(file); err == nil {
		label = replay.IndexLabel(idx)
	}
	v := 3
	if version == "v2" {
		v = 2
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	if err := replay.Convert(bw, f, v, label); err != nil {
		return fmt.Errorf("replay: %s: %w", file, err)
	}
	return bw.Flush()
}
