package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/fleetmux/fleetmux/node"
)

// recordingFlags are the recording quota flags of node and dev (node.Config).
type recordingFlags struct {
	maxBytes  int64
	parts     int
	nodeMax   int64
	retention time.Duration
}

func (r *recordingFlags) add(f *pflag.FlagSet) {
	f.Int64Var(&r.maxBytes, "recording-max-bytes", node.DefaultRecordingMaxBytes, "size of one part of a session's recording: a full output.cast is rotated to output.<offset>.cast")
	f.IntVar(&r.parts, "recording-parts", node.DefaultRecordingParts, "parts of a session's recording kept, the current one included; the oldest beyond are deleted")
	f.Int64Var(&r.nodeMax, "recordings-max-bytes", node.DefaultRecordingsMaxBytes, "all recordings together: over it, closed sessions' recordings are deleted, least recently written first, then live sessions' oldest parts (-1: no cap)")
	f.DurationVar(&r.retention, "recording-retention", node.DefaultRecordingRetention, "closed sessions' recordings last written longer ago are deleted (-1s: kept forever)")
}

func (r *recordingFlags) apply(c node.Config) node.Config {
	c.RecordingMaxBytes, c.RecordingParts = r.maxBytes, r.parts
	c.RecordingsMaxBytes, c.RecordingRetention = r.nodeMax, r.retention
	return c
}
