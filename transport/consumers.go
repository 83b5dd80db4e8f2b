package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetmux/fleetmux/api"
)

// consumerQueue is the queue group of the controllers answering consumer requests:
// one of them answers each.
const consumerQueue = "fleetmux-consumers"

// maxConsumerWorkers bounds the consumer requests answered at once.
const maxConsumerWorkers = 4

// consumerInactive is how long a made consumer nobody pulls from is kept.
const consumerInactive = 24 * time.Hour

// ServeConsumers answers the subscribers' consumer requests under prefix
// (api.Subjects.Consumer), as a controller does: the request's subject names the
// stream, the consumer (the subscriber's own name: its permissions allow no other)
// and the filter (which the server checked against the subscriber's subjects);
// the body (api.ConsumerRequest) says only where it starts and how it acks. The
// consumer made is a durable pull consumer, never a push one: no subscriber chooses
// where JetStream delivers. The reply is an api.ConsumerReply, or an error in NATS
// micro's error headers. stop unsubscribes and waits for the requests being
// answered.
func (c *Conn) ServeConsumers(prefix string) (stop func() error, err error) {
	js, err := jetstream.New(c.nc)
	if err != nil {
		return nil, fmt.Errorf("transport: consumers: %w", err)
	}
	if prefix == "" {
		prefix = api.DefaultPrefix
	}
	root := prefix + "." + api.KindConsumer
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxConsumerWorkers)
	sub, err := c.nc.QueueSubscribe(root+".>", consumerQueue, func(m *nats.Msg) {
		if !subscriberReply(strings.TrimPrefix(m.Subject, root+"."), m.Reply) {
			// No reply, or one aimed elsewhere: a controller may publish on
			// every subject of the account (the KV buckets' among them), so
			// it answers only into the asker's own inbox.
			return
		}
		select {
		case sem <- struct{}{}:
		default:
			respondMsgError(m, api.Errorf(api.CodeBusy, "%d consumer requests are being answered; retry later", maxConsumerWorkers))
			return
		}
		wg.Add(1)
		go func() { // owned by ServeConsumers: stop waits for it
			defer wg.Done()
			defer func() { <-sem }()
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			defer rcancel()
			reply, aerr := makeConsumer(rctx, js, prefix, strings.TrimPrefix(m.Subject, root+"."), m.Data)
			if aerr != nil {
				respondMsgError(m, aerr)
				return
			}
			b, _ := json.Marshal(reply)
			if err := m.Respond(b); err != nil {
				c.log.Debug("consumer reply not sent", "subject", m.Subject, "err", err)
			}
		}()
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("transport: consumers: %w", err)
	}
	if c.nc.IsConnected() {
		_ = c.nc.Flush()
	}
	var once sync.Once
	var stopErr error
	return func() error {
		once.Do(func() {
			if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				stopErr = fmt.Errorf("transport: consumers: %w", err)
			}
			cancel()
			wg.Wait()
		})
		return stopErr
	}, nil
}

// subscriberReply reports whether reply lies in the inbox of the subscriber that
// a consumer request's subject (<stream>.<name>[.<filter>]) names:
// _INBOX.subscriber.<name>. (natsauth.Identity.Inbox; the server lets the
// subscriber publish only on subjects naming itself, but not choose its reply).
func subscriberReply(rest, reply string) bool {
	_, rest, _ = strings.Cut(rest, ".")
	name, _, _ := strings.Cut(rest, ".")
	return name != "" && strings.HasPrefix(reply, "_INBOX.subscriber."+name+".")
}

// makeConsumer makes the consumer rest (<stream>.<name>[.<filter>]) asks for.
func makeConsumer(ctx context.Context, js jetstream.JetStream, prefix, rest string, body []byte) (*api.ConsumerReply, *api.Error) {
	stream, rest, _ := strings.Cut(rest, ".")
	name, filter, _ := strings.Cut(rest, ".")
	if err := api.ValidName(name); err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "consumer name: %v", err)
	}
	// The server checked the subject against the asker's permissions; the
	// filter is checked again to stay within what a subscriber may ever read.
	var kinds []string
	switch stream {
	case api.StreamOut:
		kinds = []string{api.KindOut}
	case api.StreamEvents:
		kinds = []string{api.KindBlock, api.KindEvent, api.KindAgent}
	default:
		return nil, api.Errorf(api.CodeBadRequest, "no consumers are made on stream %q", stream)
	}
	ok := filter == "" && stream == api.StreamOut
	for _, k := range kinds {
		ok = ok || strings.HasPrefix(filter, prefix+"."+k+".")
	}
	if !ok {
		return nil, api.Errorf(api.CodeBadRequest, "filter %q is not within stream %s's subjects", filter, stream)
	}
	var req api.ConsumerRequest
	if len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, api.Errorf(api.CodeBadRequest, "malformed consumer request: %v", err)
		}
	}
	cfg := jetstream.ConsumerConfig{Durable: name, FilterSubject: filter, InactiveThreshold: consumerInactive}
	switch req.DeliverPolicy {
	case "", "all":
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	case "last":
		cfg.DeliverPolicy = jetstream.DeliverLastPolicy
	case "new":
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy
	case "last_per_subject":
		cfg.DeliverPolicy = jetstream.DeliverLastPerSubjectPolicy
	case "by_start_sequence":
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, req.OptStartSeq
	case "by_start_time":
		if req.OptStartTime == nil {
			return nil, api.Errorf(api.CodeBadRequest, "by_start_time needs opt_start_time")
		}
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, req.OptStartTime
	default:
		return nil, api.Errorf(api.CodeBadRequest, "unknown deliver_policy %q", req.DeliverPolicy)
	}
	switch req.AckPolicy {
	case "", "explicit":
		cfg.AckPolicy = jetstream.AckExplicitPolicy
	case "all":
		cfg.AckPolicy = jetstream.AckAllPolicy
	case "none":
		cfg.AckPolicy = jetstream.AckNonePolicy
	default:
		return nil, api.Errorf(api.CodeBadRequest, "unknown ack_policy %q", req.AckPolicy)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "consumer %s on %s: %v", name, stream, err)
	}
	info := cons.CachedInfo()
	return &api.ConsumerReply{Stream: stream, Name: name, Filter: filter, NumPending: info.NumPending}, nil
}

// respondMsgError answers m with e as a NATS micro service error (rpcerror.go).
func respondMsgError(m *nats.Msg, e *api.Error) {
	r := &nats.Msg{Subject: m.Reply, Header: nats.Header(errorHeaders(e)), Data: errorBody(e)}
	_ = m.RespondMsg(r)
}
