// Package natsauth holds the fleet's NATS identities (DESIGN.md, Trust model): the
// Authority (operator, fleet and system accounts, the CA of the servers' TLS), the
// users it issues (Identity and its Permissions, enforced by nats-server on every
// publish and subscription), .creds files (Creds) and the reading of a connection's
// user JWT (NodeOfJWT). It holds no connection: package transport puts an Authority
// into an embedded server (ServerConfig.Auth) and Creds into a client.
package natsauth

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fleetmux/fleetmux/api"
	"github.com/nats-io/jwt/v2"
)

// NATS identities (DESIGN.md, Trust model). Every process connects with a user JWT
// of its own, issued by the fleet's account (Authority.Issue); the NATS server
// enforces the permissions below on every publish and subscription.

// Kinds of identity.
const (
	KindNode       = "node"
	KindController = "controller"
	KindSubscriber = "subscriber"
)

// InboxRoot starts every identity's reply inbox: a process replies to requests on
// its own inbox prefix, _INBOX.<kind>.<name> (Identity.Inbox), so that no identity
// reads the replies meant for another (a subscriber never sees a controller's
// replies). Clients other than fleetmux set it themselves (nats CLI --inbox-prefix,
// nats.js inboxPrefix).
const InboxRoot = "_INBOX"

// ErrIdentity: an identity is invalid (bad kind, name, node list or prefix).
var ErrIdentity = errors.New("natsauth: invalid identity")

// Identity is who a user JWT speaks for.
type Identity struct {
	// Kind is KindNode, KindController or KindSubscriber.
	Kind string
	// Name is the node's name (a node), the controller's name (its audit subject), or
	// any name for a subscriber (api.ValidName).
	Name string
	// Nodes narrows a subscriber to these nodes' subjects; empty means every node.
	// Only for subscribers.
	Nodes []string
	// Prefix is the subject prefix. Default api.DefaultPrefix.
	Prefix string
}

func (id Identity) prefix() string {
	if id.Prefix == "" {
		return api.DefaultPrefix
	}
	return id.Prefix
}

// Validate checks the identity.
func (id Identity) Validate() error {
	switch id.Kind {
	case KindNode, KindController, KindSubscriber:
	default:
		return fmt.Errorf("%w: kind %q: want %s, %s or %s", ErrIdentity, id.Kind, KindNode, KindController, KindSubscriber)
	}
	if err := api.ValidName(id.Name); err != nil {
		return fmt.Errorf("%w: %s name: %w", ErrIdentity, id.Kind, err)
	}
	if id.Prefix != "" {
		if err := api.ValidPrefix(id.Prefix); err != nil {
			return fmt.Errorf("%w: %w", ErrIdentity, err)
		}
	}
	if len(id.Nodes) > 0 && id.Kind != KindSubscriber {
		return fmt.Errorf("%w: only a subscriber is narrowed to nodes", ErrIdentity)
	}
	for _, n := range id.Nodes {
		if err := api.ValidName(n); err != nil {
			return fmt.Errorf("%w: node %w", ErrIdentity, err)
		}
	}
	return nil
}

// Inbox is the identity's reply inbox prefix (nats.CustomInboxPrefix).
func (id Identity) Inbox() string { return InboxRoot + "." + id.Kind + "." + id.Name }

// UserName is the name in the user JWT (shown in the server's logs and monitoring).
func (id Identity) UserName() string { return id.Kind + ":" + id.Name }

// ConsumerName is the one consumer name a subscriber may use on each stream it
// reads: its own name. It pulls from, acks, inspects and deletes that consumer; a
// controller creates it (api.Subjects.Consumer), pull-only, with a filter within
// the subscriber's subjects. No subscriber creates a consumer itself: nats-server
// checks a create request's subject, never the deliver subject in its body, so
// whoever may create a push consumer may make the server publish a stream's
// messages on any subject of the account.
func (id Identity) ConsumerName() string { return id.Name }

// consumerAPI is the JetStream API on the consumer named name of one stream, less
// its creation: pull, info, delete, acks and flow control replies.
func consumerAPI(stream, name string) []string {
	return []string{
		"$JS.API.CONSUMER.MSG.NEXT." + stream + "." + name,
		"$JS.API.CONSUMER.INFO." + stream + "." + name,
		"$JS.API.CONSUMER.DELETE." + stream + "." + name,
		"$JS.ACK." + stream + "." + name + ".>",
		"$JS.FC." + stream + "." + name + ".>",
	}
}

// Permissions are the identity's NATS permissions, exactly DESIGN.md's table:
//
//   - node N: subscribe <p>.rpc.N.>; publish <p>.{out,block,event,approval}.N.>,
//     <p>.approval.N and <p>.audit.N; reply to the requests it gets (allow_responses,
//     one reply each); read the policy bucket (subscribe $KV.FLEETMUX_POLICY.>, the
//     JetStream API of a KV get on that bucket alone, no consumer, its own inbox);
//     the NATS micro discovery subjects of the fleetmux-node service. Nothing else.
//   - controller C: publish <p>.rpc.> and <p>.audit.C; subscribe
//     <p>.{out,block,event,audit,approval}.>; the three KV buckets (read and write) and
//     the JetStream API to create, update and consume the streams FLEETMUX_OUT,
//     FLEETMUX_EVENTS and FLEETMUX_AUDIT and the buckets; the subscribers' consumer
//     requests (<p>.consumer.>); the account's connect/disconnect advisories and its
//     own account's connection list (ConnzRequest: the node liveness of
//     presence); its own inbox.
//   - subscriber S: subscribe <p>.{out,block,event}.> (or <p>.KIND.NODE.> for each
//     of Nodes); on FLEETMUX_OUT and FLEETMUX_EVENTS one pull consumer each, named S
//     (ConsumerName), which a controller creates on request (api.Subjects.Consumer:
//     the filter is part of the request's subject, so the server checks it stays
//     within those subjects); pull, ack, info and delete on it; its own inbox. A
//     full subscriber also reads FLEETMUX_OUT unfiltered and by sequence, and the
//     streams' info. Never FLEETMUX_AUDIT, no rpc, no JetStream consumer create,
//     no other publish.
//
// No identity but a controller may create a JetStream consumer: nats-server
// checks $JS.API.CONSUMER.CREATE's subject, never the deliver subject in its
// body, so a push consumer's creator chooses where the server publishes a
// stream's messages (a subscriber's consumer delivering output onto
// $FLEETMUX.DISCONNECT, say). Requests still name their reply subject freely, and
// the server answers there; so no identity but a controller gets a JetStream
// request whose raw answer carries bytes another party chose (DIRECT.GET of
// stored output): what remains (pulls from its own consumer, STREAM.MSG.GET's
// JSON, a node's get of the admin's policy) is what readers of the account's
// subjects must not trust on its own (presence checks an advisory's
// connection, followers confirm an exit with the node).
func (id Identity) Permissions() (jwt.Permissions, error) {
	if err := id.Validate(); err != nil {
		return jwt.Permissions{}, err
	}
	p := id.prefix()
	var pub, sub []string
	var resp *jwt.ResponsePermission
	switch id.Kind {
	case KindNode:
		n := id.Name
		for _, k := range []string{api.KindOut, api.KindBlock, api.KindEvent, api.KindAgent, api.KindApproval} {
			pub = append(pub, p+"."+k+"."+n+".>")
		}
		pub = append(pub, p+"."+api.KindApproval+"."+n, p+"."+api.KindAudit+"."+n)
		pub = append(pub, kvGetAPI(api.BucketPolicy)...)
		sub = append(sub, p+"."+api.KindRPC+"."+n+".>", "$KV."+api.BucketPolicy+".>", id.Inbox()+".>")
		// nats.go/micro subscribes to its discovery subjects (PING, INFO, STATS; bare,
		// by service name, by service id); the node answers them for its service only.
		for _, verb := range []string{"PING", "INFO", "STATS"} {
			sub = append(sub, "$SRV."+verb, "$SRV."+verb+"."+api.ServiceName, "$SRV."+verb+"."+api.ServiceName+".*")
		}
		resp = &jwt.ResponsePermission{MaxMsgs: 1}
	case KindController:
		pub = append(pub, p+"."+api.KindRPC+".>", p+"."+api.KindAudit+"."+id.Name)
		for _, k := range []string{api.KindOut, api.KindBlock, api.KindEvent, api.KindAgent, api.KindAudit, api.KindApproval} {
			sub = append(sub, p+"."+k+".>")
		}
		pub = append(pub, "$JS.API.INFO", "$JS.API.STREAM.NAMES", ConnzRequest)
		for _, s := range []string{api.StreamOut, api.StreamEvents, api.StreamAudit, "KV_" + api.BucketTokens, "KV_" + api.BucketPolicy, "KV_" + api.BucketApprovals} {
			pub = append(pub, jsAdminAPI(s)...)
		}
		for _, b := range []string{api.BucketTokens, api.BucketPolicy, api.BucketApprovals} {
			pub = append(pub, "$KV."+b+".>")
			sub = append(sub, "$KV."+b+".>")
		}
		sub = append(sub, AdvisoryConnect, AdvisoryDisconnect, p+"."+api.KindConsumer+".>", id.Inbox()+".>")
		resp = &jwt.ResponsePermission{MaxMsgs: 1} // the replies to consumer requests
	case KindSubscriber:
		for _, k := range []string{api.KindOut, api.KindBlock, api.KindEvent, api.KindAgent} {
			sub = append(sub, id.filters(k)...)
		}
		sub = append(sub, id.Inbox()+".>")
		name := id.ConsumerName()
		for _, s := range []string{api.StreamOut, api.StreamEvents} {
			pub = append(pub, consumerAPI(s, name)...)
		}
		subj := api.Subjects{Prefix: p}
		for _, f := range id.filters(api.KindOut) {
			pub = append(pub, subj.Consumer(api.StreamOut, name, f))
		}
		for _, k := range []string{api.KindBlock, api.KindEvent, api.KindAgent} {
			for _, f := range id.filters(k) {
				pub = append(pub, subj.Consumer(api.StreamEvents, name, f))
			}
		}
		if len(id.Nodes) == 0 {
			// FLEETMUX_OUT holds nothing a full subscriber may not read: an unfiltered
			// consumer and reads by sequence are fine there (STREAM.MSG.GET answers
			// in a JSON envelope; DIRECT.GET is not granted: its raw reply, sent to
			// any reply subject the asker names, would publish stored output
			// there). The streams' info lists subjects (subjects_filter), so only a
			// full subscriber gets it.
			pub = append(pub, subj.Consumer(api.StreamOut, name, ""), "$JS.API.STREAM.MSG.GET."+api.StreamOut,
				"$JS.API.STREAM.INFO."+api.StreamOut, "$JS.API.STREAM.INFO."+api.StreamEvents)
		}
	}
	var perms jwt.Permissions
	perms.Pub.Allow.Add(pub...)
	perms.Sub.Allow.Add(sub...)
	perms.Resp = resp
	return perms, nil
}

// filters are the subscriber's subjects of one kind: <p>.KIND.> or one per node.
func (id Identity) filters(kind string) []string {
	p := id.prefix()
	if len(id.Nodes) == 0 {
		return []string{p + "." + kind + ".>"}
	}
	nodes := slices.Clone(id.Nodes)
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	out := make([]string, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, p+"."+kind+"."+n+".>")
	}
	return out
}

// jsAdminAPI is the JetStream API of a controller on one stream: manage the stream
// (create, update, info, purge, get and delete messages, delete) and its consumers.
func jsAdminAPI(stream string) []string {
	return []string{
		"$JS.API.STREAM.*." + stream,
		"$JS.API.STREAM.MSG.*." + stream,
		"$JS.API.DIRECT.GET." + stream,
		"$JS.API.DIRECT.GET." + stream + ".>",
		"$JS.API.CONSUMER.*." + stream,
		"$JS.API.CONSUMER.*." + stream + ".>",
		"$JS.API.CONSUMER.MSG.NEXT." + stream + ".*",
		"$JS.API.CONSUMER.DURABLE.CREATE." + stream + ".*",
		"$JS.FC." + stream + ".>",
		"$JS.ACK." + stream + ".>",
	}
}

// kvGetAPI is the JetStream API of a KV get on one bucket, and no consumer: the
// stream's info and message gets. A reader learns of changes by subscribing to the
// bucket's subjects ($KV.<bucket>.>) and getting the key again (transport.Policy).
func kvGetAPI(bucket string) []string {
	stream := "KV_" + bucket
	return []string{
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.DIRECT.GET." + stream,
		"$JS.API.DIRECT.GET." + stream + ".>",
		"$JS.API.STREAM.MSG.GET." + stream,
	}
}

// InboxOf returns the inbox prefix granted by a user's permissions (the subscribe
// permission _INBOX.<kind>.<name>.>), or "" when there is none.
func InboxOf(perms jwt.Permissions) string {
	for _, s := range perms.Sub.Allow {
		if rest, ok := strings.CutPrefix(s, InboxRoot+"."); ok && strings.HasSuffix(rest, ".>") && !strings.ContainsAny(strings.TrimSuffix(rest, ".>"), "*>") {
			return strings.TrimSuffix(s, ".>")
		}
	}
	return ""
}

// ConnzRequest is the subject on which every server of the cluster lists the
// fleet account's connections to a client of that account (nats-server imports
// it into every account from the system account, narrowed to the asking
// account): the one system request a controller may make.
const ConnzRequest = "$SYS.REQ.ACCOUNT.PING.CONNZ"

// NodeOfJWT returns the node a connection speaks for: the name of its user JWT
// ("node:NAME", Identity.UserName) when the JWT's signature holds and it was
// issued by account (the account the server put the connection in). Anything
// else (a controller, a subscriber, a malformed JWT) is no node.
func NodeOfJWT(userJWT, account string) (string, bool) {
	if userJWT == "" {
		return "", false
	}
	uc, err := jwt.DecodeUserClaims(userJWT) // checks the signature by its issuer
	if err != nil {
		return "", false
	}
	issuer := uc.Issuer
	if uc.IssuerAccount != "" {
		issuer = uc.IssuerAccount // issued by a signing key of the account
	}
	if account == "" || issuer != account {
		return "", false
	}
	name, ok := strings.CutPrefix(uc.Name, KindNode+":")
	if !ok || api.ValidName(name) != nil {
		return "", false
	}
	return name, true
}
