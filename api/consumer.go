package api

import "time"

// ConsumerRequest is the body of a consumer request (Subjects.Consumer): how the
// pull consumer a controller makes starts and acknowledges. The controller writes
// every other setting (no deliver subject: the consumer is pulled, never pushed).
type ConsumerRequest struct {
	// DeliverPolicy is where the consumer starts: "all" (default), "last", "new",
	// "last_per_subject", "by_start_sequence" (OptStartSeq) or "by_start_time"
	// (OptStartTime).
	DeliverPolicy string     `json:"deliver_policy,omitempty"`
	OptStartSeq   uint64     `json:"opt_start_seq,omitempty"`
	OptStartTime  *time.Time `json:"opt_start_time,omitempty"`
	// AckPolicy is "explicit" (default), "all" or "none".
	AckPolicy string `json:"ack_policy,omitempty"`
}

// ConsumerReply is the reply to a consumer request: the consumer to pull from
// ($JS.API.CONSUMER.MSG.NEXT.<stream>.<name>).
type ConsumerReply struct {
	Stream     string `json:"stream"`
	Name       string `json:"name"`
	Filter     string `json:"filter_subject,omitempty"`
	NumPending uint64 `json:"num_pending"`
}
