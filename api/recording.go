package api

// The recording verb and route: a session's asciicast recording, served in pieces.
//
// GET /v1/sessions/{node}/{id}/recording[?format=v3|v2] answers the session's whole
// recording as one asciicast file (Content-Type RecordingContentType): v3 by default,
// v2 with format=v2 (for players that read only v2, e.g. asciinema 2.2). It holds the
// parts the node still keeps (a node rotates a recording at its quota: the header's
// fleetmux_offset is the output offset of the first byte), as they were when the
// request arrived; every block's marker label carries its exit code once the block
// finished ("block 3: make test ⏎ exit 2"). The recording of a closed session is served
// while the node keeps it. The node's verb serves one piece per request
// (RecordingRequest); the controller strings them together.

// VerbRecording is the node verb that reads a piece of a session's recording.
const VerbRecording = "recording"

// RecordingContentType is the media type of a served recording.
const RecordingContentType = "application/x-asciicast"

// Recording formats (RecordingRequest.Format, the route's ?format=).
const (
	RecordingV3 = 3
	RecordingV2 = 2
)

// RecordingRequest (verb recording) asks for the next piece of a recording: the
// events of part Part from file offset From, re-encoded in Format.
type RecordingRequest struct {
	Session string `json:"session"`
	// Format is the asciicast version to answer in: RecordingV3 (0 too) or RecordingV2.
	Format int `json:"format,omitempty"`
	// Part is the output offset the part starts at (RecordingReply.Parts); -1: the
	// oldest the node keeps.
	Part int64 `json:"part"`
	// From is the file offset in the part to go on from (RecordingReply.Next); 0: its
	// first event.
	From int64 `json:"from,omitempty"`
	// End is where the part ends for this reading (RecordingReply.End of the part's
	// first piece; 0: its size now).
	End int64 `json:"end,omitempty"`
	// TUS is the time of the last event already served, in µs since the recording's
	// start (RecordingReply.TUS): the next piece's intervals count from it.
	TUS int64 `json:"t_us,omitempty"`
	// Header asks for the recording's header line first (the first piece).
	Header bool `json:"header,omitempty"`
	// Max bounds the part's bytes read (0 or more than MaxReadBytes: MaxReadBytes).
	Max int `json:"max,omitempty"`
}

// RecordingReply is a piece of a recording: whole event lines (Data, base64 in JSON).
type RecordingReply struct {
	// Parts are the start offsets of the parts the node keeps, oldest first (the
	// current part last).
	Parts []int64 `json:"parts"`
	// Part is the part this piece is from.
	Part int64  `json:"part"`
	Data []byte `json:"data"`
	// Next is the file offset in the part to ask for next; End where the part ends
	// for this reading: Next ≥ End means the part is done.
	Next int64 `json:"next"`
	End  int64 `json:"end"`
	// TUS is the time of the piece's last event (µs), for the next request.
	TUS int64 `json:"t_us"`
}
