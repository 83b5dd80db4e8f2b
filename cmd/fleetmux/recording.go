package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/fleetmux/fleetmux/node"
)

// recordingFlags are the recording quota flags of node and dev, and how long they
// keep exited sessions listed (node.Config).
type recordingFlags struct {
	maxBytes  int64
	parts     int
	nodeMax   int64
	retention time.Duration
	reap      time.Duration
}

func (r *recordingFlags) add(f *pflag.FlagSet) {
	f.Int64Var(&r.maxBytes, "recording-max-bytes", node.DefaultRecordingMaxBytes, "size of one part of a session's recording: a full output.cast is rotated to output.<offset>.cast")
	f.IntVar(&r.parts, "recording-parts", node.DefaultRecordingParts, "parts of a session's recording kept, the current one included; the oldest beyond are deleted")
	f.Int64Var(&r.nodeMax, "recordings-max-bytes", node.DefaultRecordingsMaxBytes, "all recordings together: over it, closed sessions' recordings are deleted, least recently written first, then live sessions' oldest parts (-1: no cap)")
	f.DurationVar(&r.retention, "recording-retention", node.DefaultRecordingRetention, "closed sessions' recordings last written longer ago are deleted (-1s: kept forever)")
	f.DurationVar(&r.reap, "reap-exited", node.DefaultReapExited, "an exited session stays listed this long (its reap_at), then it is closed; its recording stays (0: kept until closed)")
}

func (r *recordingFlags) apply(c node.Config) node.Config {
	c.RecordingMaxBytes, c.RecordingParts = r.maxBytes, r.parts
	c.RecordingsMaxBytes, c.RecordingRetention = r.nodeMax, r.retention
	c.ReapExited = r.reap
	if r.reap <= 0 {
		c.ReapExited = -1 // node.Config's "never"; its zero is the default
	}
	return c
}
