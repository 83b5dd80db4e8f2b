package session

// A holder session's stream that ends without the exit. Any process with the
// holder's uid may attach to a session through the holder's socket; the holder
// lets one attach at a time, by epoch (holder.Client.Attach), so a process can
// take the stream only by naming the live one's epoch, and the agent whose
// stream it took finds out at once: its stream ends without the exit. The agent
// then asks the holder what became of the session, rather than take the end of
// its stream for the end of the program (which left a live shell marked exited,
// out of every agent's reach, and counted toward the node's sessions).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/fleetmux/fleetmux/holder"
)

// maxRetakes bounds the times one session's stream is taken back: a process
// that takes it again and again gets the session closed instead (and that
// said), never a session no agent reads.
const maxRetakes = 5

// retake is the read loop's answer to a stream that ended (cause) without the
// exit. It returns the stream to read on from raw, or nil to end the read:
//   - Detach or Close ended it: nil;
//   - the holder does not answer (it is gone, and the program with it), or no
//     longer has the session: nil, said in the log;
//   - the session is still in the holder (another process attached to it, or
//     the stream broke): its stream is taken back from raw, naming the epoch
//     the holder shows, and the takeover logged with the taker's pid; an attach
//     that fails is a look more (the taker may have ended the new stream before
//     its reply);
//   - after maxRetakes of those, the session is closed in the holder, and that
//     logged: nil.
func (s *Session) retake(raw int64, cause error) *holder.Stream {
	for s.hold.retakes < maxRetakes {
		if s.ending() {
			return nil
		}
		mine := s.hold.stream().Epoch
		ctx, cancel := context.WithTimeout(context.Background(), holderTimeout)
		info, err := heldInfo(ctx, s.hold.c, s.cfg.ID)
		if err != nil {
			cancel()
			if errors.Is(err, holder.ErrNoSession) {
				s.log.Warn("holder stream ended without the exit, and the holder no longer has the session", "stream", cause)
			} else {
				s.log.Warn("holder stream ended without the exit, and the holder does not answer: it is gone, and the program with it", "stream", cause, "err", err)
			}
			return nil
		}
		s.hold.retakes++
		if info.Epoch != mine {
			s.log.Warn("the session's holder stream was taken by another process: taking it back", "pid", info.StreamPID, "epoch", info.Epoch)
		} else {
			s.log.Warn("holder stream ended without the exit; the holder still has the session: attaching again", "stream", cause)
		}
		st, err := s.hold.c.Attach(ctx, s.cfg.ID, raw, info.Epoch)
		cancel()
		switch {
		case errors.Is(err, holder.ErrStale):
			continue // attached again since the look: look again
		case errors.Is(err, holder.ErrNoSession):
			s.log.Warn("holder stream ended without the exit, and the holder no longer has the session", "stream", cause)
			return nil
		case err != nil:
			// The new stream ended before its reply (another attach named its
			// epoch at once), or the holder went: the next look tells which.
			s.log.Warn("holder stream not taken back: looking again", "stream", cause, "err", err)
			continue
		}
		st.Master.Close() // the session's copy of the master is the first stream's
		if st.Kept != nil {
			st.Kept.Close()
		}
		if !s.hold.replace(st) {
			return nil
		}
		return st
	}
	s.log.Error(fmt.Sprintf("the session's holder stream was taken by other processes %d times: closing the session", s.hold.retakes))
	ctx, cancel := context.WithTimeout(context.Background(), holderTimeout)
	defer cancel()
	if _, err := s.hold.c.CloseSession(ctx, s.cfg.ID); err != nil && !errors.Is(err, holder.ErrNoSession) {
		s.log.Warn("holder did not close the session", "err", err)
	}
	return nil
}

// ending reports whether Detach or Close began.
func (s *Session) ending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// heldInfo is what the holder c knows of session id (holder.ErrNoSession when
// it has no such session).
func heldInfo(ctx context.Context, c *holder.Client, id string) (holder.Info, error) {
	list, err := c.List(ctx)
	if err != nil {
		return holder.Info{}, err
	}
	for _, i := range list {
		if i.ID == id {
			return i, nil
		}
	}
	return holder.Info{}, fmt.Errorf("%w: %s", holder.ErrNoSession, id)
}

// takeStream attaches to session id from offset from while another process is
// attached to it: it names the epoch the holder shows (the other stream ends),
// and logs who held it.
func takeStream(ctx context.Context, c *holder.Client, id string, from int64, log *slog.Logger) (*holder.Stream, error) {
	var err error
	for range maxRetakes {
		var info holder.Info
		if info, err = heldInfo(ctx, c, id); err != nil {
			return nil, err
		}
		log.Warn("another process is attached to the session in the holder: taking its stream", "pid", info.StreamPID, "epoch", info.Epoch)
		var st *holder.Stream
		if st, err = c.Attach(ctx, id, from, info.Epoch); !errors.Is(err, holder.ErrStale) {
			return st, err
		}
	}
	return nil, err
}
