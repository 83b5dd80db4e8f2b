package api

import "time"

// The writer lease (DESIGN "Guardrails"): one writer per session at a time. run,
// input and keys take it for their writer; a run holds it until its block ends, a
// writer that types holds it for WriterLease past their last input; others get
// CodeBusy naming the holder unless they take it over (verb take_over, operator
// or admin), which tells the holder (EventTakenOver). Viewers never hold it.

// WriterLease is how long a writer that typed (input, keys, an attach's keystrokes,
// a take-over) keeps a session's lease past their last input.
const WriterLease = 3 * time.Second

// EventTakenOver is the session event (SessionEvent.Type) published when a writer
// took a session's lease over from another: SessionEvent.Holder is the new holder,
// SessionEvent.Previous the writer that lost it.
const EventTakenOver = "taken_over"

// Writer is who writes into a session: the principal, actor and role of a verified
// request. Principal and Actor are untrusted text for a terminal: print them
// through Printable.
type Writer struct {
	Principal string `json:"principal"`
	Actor     string `json:"actor,omitempty"`
	Role      string `json:"role,omitempty"`
	// Attach is set when the writer is a person typing in an attach.
	Attach bool `json:"attach,omitempty"`
}

// Name is how a message names the writer: "PRINCIPAL" or "PRINCIPAL (ACTOR)",
// printable.
func (w Writer) Name() string {
	if w.Actor == "" || w.Actor == w.Principal {
		return Printable(w.Principal)
	}
	return Printable(w.Principal) + " (" + Printable(w.Actor) + ")"
}

// TakeOverRequest (verb take_over) gives the session's writer lease to the caller.
type TakeOverRequest struct {
	Session string `json:"session"`
}

// TakeOver is the reply of take_over (and of POST /v1/sessions/{node}/{id}/take_over):
// the session, and the writer that held the lease before (absent: nobody did).
type TakeOver struct {
	Session  Session `json:"session"`
	Previous *Writer `json:"previous,omitempty"`
}
