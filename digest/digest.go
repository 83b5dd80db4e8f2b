// Package digest makes the fleet's catch-up digest (DESIGN "Digest"): from a
// snapshot of sessions, blocks, approvals and agents, the text of what happened
// since a cursor, within a token budget, without a model: the same snapshot and
// budget give the same text. What goes first: what waits for a person or an
// agent now, pending approvals, failures (with the head and tail of their
// output), decided approvals, agents that changed state, sessions, what still
// runs, and successes one line each. Where the budget cuts, items shrink to one
// line, then are counted, and blocks left out are named in ReadBlock.
package digest

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fleetmux/fleetmux/api"
)

// Session is a session with its blocks (those since the cursor, and any still
// running).
type Session struct {
	api.Session
	Blocks []api.Block `json:"blocks"`
}

// Snapshot is what a digest is made from.
type Snapshot struct {
	Scope string `json:"scope"`
	// Since is the cursor's time (zero: from the beginning); At is when the
	// snapshot was taken (the next cursor).
	Since     time.Time      `json:"since"`
	At        time.Time      `json:"at"`
	Sessions  []Session      `json:"sessions"`
	Approvals []api.Approval `json:"approvals"`
	Agents    []api.Agent    `json:"agents"`
	// Texts are the rendered outputs of failed blocks, by Pointer (those the
	// gatherer read; the others get one line).
	Texts       map[string]string `json:"texts"`
	Unavailable []string          `json:"unavailable"`
}

// Pointer names block n of a session: "NODE/ID#N".
func Pointer(node, id string, n int) string { return node + "/" + id + "#" + strconv.Itoa(n) }

// In reports whether t is in the digest's window (Since, At].
func (s Snapshot) In(t time.Time) bool { return t.After(s.Since) && !t.After(s.At) }

// item is one entry of a section: its full lines, its one-line form, and the
// block it points at ("" for none).
type item struct {
	full  []string
	short string
	ptr   string
}

type section struct {
	title string
	items []item
}

// trailerBytes is kept free for the last line (what the budget left out): 5%
// of the budget, at most 200 bytes.
func trailerBytes(budget int) int { return min(200, budget*4/20) }

// Build makes the digest of s within budget tokens (api.DigestTokens counts).
func Build(s Snapshot, budget int) api.Digest {
	budget = max(api.MinDigestTokens, min(budget, api.MaxDigestTokens))
	d := api.Digest{Scope: s.Scope, Next: api.DigestCursor(s.At), BudgetTokens: budget, ReadBlock: []string{},
		Unavailable: slices.Clone(s.Unavailable)}
	if !s.Since.IsZero() {
		d.Since = api.DigestCursor(s.Since)
	}
	secs := s.sections(&d)

	since := "the beginning"
	if !s.Since.IsZero() {
		since = s.Since.UTC().Format(time.RFC3339)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "fleetmux digest (%s) since %s until %s: %d failed, %d ok, %d running, %d waiting, %d approvals pending, %d decided\n",
		s.Scope, since, s.At.UTC().Format(time.RFC3339), d.Failed, d.Succeeded, d.Running, d.Waiting, d.Pending, d.Decided)
	if len(s.Unavailable) > 0 {
		fmt.Fprintf(&b, "nodes that did not answer: %s\n", strings.Join(s.Unavailable, ", "))
	}
	limit := budget*4 - trailerBytes(budget)
	left := map[string]int{}
	var order []string
	for _, sec := range secs {
		if len(sec.items) == 0 {
			continue
		}
		title := "\n" + sec.title + "\n"
		titled := false
		for _, it := range sec.items {
			if len(it.full) == 0 {
				it.full = []string{it.short}
			}
			full := strings.Join(it.full, "\n") + "\n"
			short := it.short + "\n"
			extra := 0
			if !titled {
				extra = len(title)
			}
			switch {
			case b.Len()+extra+len(full) <= limit:
				if !titled {
					b.WriteString(title)
					titled = true
				}
				b.WriteString(full)
				continue
			case len(it.full) > 1 && b.Len()+extra+len(short) <= limit:
				if !titled {
					b.WriteString(title)
					titled = true
				}
				b.WriteString(short)
			default:
				if left[sec.title] == 0 {
					order = append(order, sec.title)
				}
				left[sec.title]++
				d.Omitted++
			}
			if it.ptr != "" && len(d.ReadBlock) < maxPointers {
				d.ReadBlock = append(d.ReadBlock, it.ptr)
			}
		}
	}
	if d.Omitted > 0 {
		parts := make([]string, 0, len(order))
		for _, t := range order {
			parts = append(parts, fmt.Sprintf("%d %s", left[t], strings.ToLower(t)))
		}
		b.WriteString(clip("… left out for the budget: "+strings.Join(parts, ", ")+" (read_block names the blocks)", trailerBytes(budget)-1) + "\n")
	}
	d.Text = b.String()
	d.Tokens = api.DigestTokens(d.Text)
	return d
}

// maxPointers bounds ReadBlock.
const maxPointers = 200

// sections sorts s into the digest's sections, in their order, and counts.
func (s Snapshot) sections(d *api.Digest) []section {
	waiting := section{title: "WAITING NOW"}
	pending := section{title: "APPROVALS PENDING"}
	failed := section{title: "FAILED"}
	decided := section{title: "APPROVALS DECIDED"}
	agents := section{title: "AGENTS"}
	sessions := section{title: "SESSIONS"}
	running := section{title: "RUNNING"}
	ok := section{title: "OK"}

	type done struct { // pointers: 10,000 blocks are sorted, not their copies
		s *Session
		b *api.Block
	}
	var fails, oks []done
	ss := slices.Clone(s.Sessions)
	slices.SortFunc(ss, func(a, b Session) int { return addrOrder(a.Node, a.ID, b.Node, b.ID) })
	for i := range ss {
		se := &ss[i]
		addr := se.Node + "/" + se.ID
		active := s.In(se.CreatedAt)
		for j := range se.Blocks {
			bl := &se.Blocks[j]
			switch {
			case bl.State == api.BlockRunning:
				d.Running++
				active = true
				running.items = append(running.items, item{
					short: fmt.Sprintf("- %s #%d since %s: %s", addr, bl.N, bl.StartedAt.UTC().Format(time.RFC3339), cmdText(bl.Command)),
					ptr:   Pointer(se.Node, se.ID, bl.N)})
			case bl.FinishedAt != nil && s.In(*bl.FinishedAt):
				active = true
				if bl.ExitCode != nil && *bl.ExitCode != 0 {
					fails = append(fails, done{se, bl})
				} else {
					oks = append(oks, done{se, bl})
				}
			}
		}
		switch {
		case se.State == api.StateWaitingInput:
			d.Waiting++
			waiting.items = append(waiting.items, item{short: fmt.Sprintf("- %s waits for input: %s", addr, cmdText(se.CurrentCommand))})
		case active && s.In(se.CreatedAt):
			sessions.items = append(sessions.items, item{short: fmt.Sprintf("- %s new, %s%s", addr, se.State, exitNote(*se))})
		case active && se.State == api.StateExited:
			sessions.items = append(sessions.items, item{short: fmt.Sprintf("- %s exited%s", addr, exitNote(*se))})
		}
	}
	newest := func(a, b done) int {
		return cmp.Or(b.b.FinishedAt.Compare(*a.b.FinishedAt), addrOrder(a.s.Node, a.s.ID, b.s.Node, b.s.ID), a.b.N-b.b.N)
	}
	slices.SortFunc(fails, newest)
	slices.SortFunc(oks, newest)
	for _, f := range fails {
		d.Failed++
		ptr := Pointer(f.s.Node, f.s.ID, f.b.N)
		head := fmt.Sprintf("- %s #%d exit %d (%s) in %s: %s", f.s.Node+"/"+f.s.ID, f.b.N, *f.b.ExitCode, dur(*f.b), cmdText(f.b.Cwd), cmdText(f.b.Command))
		it := item{full: []string{head}, short: head, ptr: ptr}
		if text, ok := s.Texts[ptr]; ok {
			for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
				it.full = append(it.full, "    | "+clean(l))
			}
		}
		failed.items = append(failed.items, it)
	}
	for _, o := range oks {
		d.Succeeded++
		code := "?"
		if o.b.ExitCode != nil {
			code = strconv.Itoa(*o.b.ExitCode)
		}
		ok.items = append(ok.items, item{short: fmt.Sprintf("- %s #%d exit %s (%s): %s", o.s.Node+"/"+o.s.ID, o.b.N, code, dur(*o.b), cmdText(o.b.Command)),
			ptr: Pointer(o.s.Node, o.s.ID, o.b.N)})
	}

	aps := slices.Clone(s.Approvals)
	slices.SortFunc(aps, func(a, b api.Approval) int {
		return cmp.Or(a.RequestedAt.Compare(b.RequestedAt), addrOrder(a.Node, a.ID, b.Node, b.ID))
	})
	for _, a := range aps {
		where := ""
		if a.Session != "" {
			where = " in " + a.Node + "/" + a.Session
		}
		what := cmdText(a.Command)
		if a.Tool != "" {
			what = clean(a.Agent) + " " + clean(a.Tool) + ": " + what
		}
		switch {
		case a.State == api.ApprovalPending:
			d.Pending++
			pending.items = append(pending.items, item{short: fmt.Sprintf("- %s/%s %s%s by %s (rule %s, expires %s): %s", a.Node, a.ID, a.Kind, where,
				clean(a.Principal), clean(a.Rule), a.ExpiresAt.UTC().Format(time.RFC3339), what)})
		case a.DecidedAt != nil && s.In(*a.DecidedAt):
			d.Decided++
			by := ""
			if a.DecidedBy != "" {
				by = " by " + clean(a.DecidedBy)
			}
			decided.items = append(decided.items, item{short: fmt.Sprintf("- %s/%s %s%s%s: %s", a.Node, a.ID, a.State, by, where, what)})
		}
	}

	ags := slices.Clone(s.Agents)
	slices.SortFunc(ags, func(a, b api.Agent) int { return addrOrder(a.Node, a.ID, b.Node, b.ID) })
	for _, a := range ags {
		line := fmt.Sprintf("- agent %s/%s (%s) %s since %s", a.Node, a.ID, clean(a.Driver), a.State, a.StateSince.UTC().Format(time.RFC3339))
		if a.Evidence != "" {
			line += ": " + cmdText(a.Evidence)
		}
		switch {
		case a.State == api.AgentWaitingPermission || a.State == api.AgentWaitingInput:
			d.Waiting++
			waiting.items = append(waiting.items, item{short: line})
		case s.In(a.StateSince):
			agents.items = append(agents.items, item{short: line})
		}
	}
	return []section{waiting, pending, failed, decided, agents, sessions, running, ok}
}

func exitNote(s Session) string {
	if s.LastExitCode != nil {
		return fmt.Sprintf(" (last exit %d)", *s.LastExitCode)
	}
	return ""
}

// addrOrder orders NODE/ID addresses: by node, then by id (s2 before s10).
func addrOrder(an, ai, bn, bi string) int {
	if c := strings.Compare(an, bn); c != 0 {
		return c
	}
	if len(ai) != len(bi) {
		return len(ai) - len(bi)
	}
	return strings.Compare(ai, bi)
}

// dur is a block's duration in words.
func dur(b api.Block) string {
	if b.FinishedAt == nil {
		return "?"
	}
	d := b.FinishedAt.Sub(b.StartedAt)
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	return d.Round(time.Second).String()
}

// cmdText is a command (or evidence) on one line, clean and clipped.
func cmdText(s string) string { return "`" + clean(api.OneLine(s, 160)) + "`" }

// clean replaces control characters (other than tab) with U+FFFD: the digest is
// printed in terminals.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if r != '\t' && unicode.IsControl(r) {
			return '\uFFFD'
		}
		return r
	}, s)
}

// clip cuts s to at most n bytes (on a rune boundary), ending a cut in "…".
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n -= len("…")
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:max(n, 0)] + "…"
}
