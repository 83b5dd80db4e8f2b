package main

import (
	"github.com/spf13/pflag"

	"github.com/fleetmux/fleetmux/node"
)

// recordingFlags are the recording quota flags of node and dev (node.Config).
type recordingFlags struct {
	maxBytes int64
	parts    int
}

func (r *recordingFlags) add(f *pflag.FlagSet) {
	f.Int64Var(&r.maxBytes, "recording-max-bytes", node.DefaultRecordingMaxBytes, "size of one part of a session's recording: a full output.cast is rotated to output.<offset>.cast")
	f.IntVar(&r.parts, "recording-parts", node.DefaultRecordingParts, "parts of a session's recording kept, the current one included; the oldest beyond are deleted")
}

func (r *recordingFlags) apply(c node.Config) node.Config {
	c.RecordingMaxBytes, c.RecordingParts = r.maxBytes, r.parts
	return c
}
