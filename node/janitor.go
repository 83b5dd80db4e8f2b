package node

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Defaults of the node-wide recording limits (Config.RecordingsMaxBytes,
// Config.RecordingRetention).
const (
	DefaultRecordingsMaxBytes = 1 << 30
	DefaultRecordingRetention = 30 * 24 * time.Hour
)

// sweepEvery is how often the janitor checks the recordings (besides at start and
// after each rotation).
const sweepEvery = time.Minute

// recDir is one session's recording directory as the janitor sees it.
type recDir struct {
	id   string
	path string
	size int64
	mod  time.Time // the newest file's modification time: when it was last written
	live *entry    // nil: the session is closed
}

// janitor is the node's goroutine that enforces the retention and the node-wide cap
// on DIR/sessions: at start, every sweepEvery and when a session rotates its
// recording (n.sweep). It stops when the node's context ends (Close).
func (n *Node) janitor() {
	defer n.wg.Done()
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		n.sweepRecordings(time.Now())
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		case <-n.sweep:
		}
	}
}

// kickJanitor asks the janitor for a sweep soon; it never blocks.
func (n *Node) kickJanitor() {
	select {
	case n.sweep <- struct{}{}:
	default:
	}
}

// sweepRecordings deletes the recordings of closed sessions last written more than
// Config.RecordingRetention before now; then, while all recordings together exceed
// Config.RecordingsMaxBytes, whole recordings of closed sessions, least recently
// written first, then the oldest rotated parts of live sessions (never a live
// session's current part). Live sessions are never deleted whole.
func (n *Node) sweepRecordings(now time.Time) {
	dirs := n.recordingDirs()
	var total int64
	kept := dirs[:0]
	for _, d := range dirs {
		if d.live == nil && n.cfg.RecordingRetention > 0 && now.Sub(d.mod) > n.cfg.RecordingRetention {
			n.removeRecording(d, "older than the retention")
			continue
		}
		total += d.size
		kept = append(kept, d)
	}
	if n.cfg.RecordingsMaxBytes < 0 || total <= n.cfg.RecordingsMaxBytes {
		return
	}
	sort.SliceStable(kept, func(i, j int) bool { return kept[i].mod.Before(kept[j].mod) })
	for _, d := range kept {
		if total <= n.cfg.RecordingsMaxBytes {
			return
		}
		if d.live == nil {
			n.removeRecording(d, "over the node's recordings cap")
			total -= d.size
		}
	}
	for _, d := range kept { // live sessions, least recently written first
		for d.live != nil && total > n.cfg.RecordingsMaxBytes {
			freed := d.live.dropOldestPart()
			if freed == 0 {
				break
			}
			n.log.Warn("recording part deleted: over the node's recordings cap", "session", d.id, "bytes", freed)
			total -= freed
		}
	}
}

func (n *Node) removeRecording(d recDir, why string) {
	if err := os.RemoveAll(d.path); err != nil {
		n.log.Error("recording not deleted", "session", d.id, "err", err)
		return
	}
	n.log.Info("recording deleted: "+why, "session", d.id, "bytes", d.size, "last_written", d.mod)
}

// recordingDirs lists DIR/sessions with each directory's size and live session.
// It holds n.mu while listing, so a session being created is either listed live or
// not listed.
func (n *Node) recordingDirs() []recDir {
	root := filepath.Join(n.cfg.DataDir, "sessions")
	n.mu.Lock()
	des, err := os.ReadDir(root)
	var dirs []recDir
	for _, de := range des {
		if de.IsDir() {
			dirs = append(dirs, recDir{id: de.Name(), path: filepath.Join(root, de.Name()), live: n.sessions[de.Name()]})
		}
	}
	n.mu.Unlock()
	if err != nil {
		n.log.Error("recordings not listed", "err", err)
		return nil
	}
	for i := range dirs {
		d := &dirs[i]
		_ = filepath.WalkDir(d.path, func(_ string, de fs.DirEntry, err error) error {
			if err != nil || de.IsDir() {
				return nil
			}
			if fi, err := de.Info(); err == nil {
				d.size += fi.Size()
				if fi.ModTime().After(d.mod) {
					d.mod = fi.ModTime()
				}
			}
			return nil
		})
	}
	return dirs
}
