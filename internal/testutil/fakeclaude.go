package testutil

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"
)

// FakeClaude is a fake Anthropic Messages API on loopback, enough for the real
// Claude Code CLI (ANTHROPIC_BASE_URL=URL, any ANTHROPIC_API_KEY) to start and run
// scripted turns with no network:
//
//   - a user message with a line "bash: CMD", in a request that offers tools, is answered with a Bash tool_use
//     running CMD; the tool_result that comes back is answered with the text
//     "ran: CMD" (or "denied: CMD" when the result is an error);
//   - any other message is answered with the text "FAKE-ANSWER: " and the first
//     line of the prompt.
//
// Streaming requests get server-sent events exactly as the real API sends them;
// requests for anything but /v1/messages (and its count_tokens) get an empty JSON
// object, so that the CLI's side calls at start fail soft. Every request is kept
// (Requests) for tests to check what the CLI asked.
type FakeClaude struct {
	// URL is the base URL to give the CLI as ANTHROPIC_BASE_URL.
	URL string

	srv *http.Server
	ln  net.Listener
	wg  sync.WaitGroup

	mu    sync.Mutex
	reqs  []FakeClaudeRequest
	seq   int
	asked map[string]bool // commands asked for with a tool_use
}

// FakeClaudeRequest is one request the fake answered.
type FakeClaudeRequest struct {
	Method, Path string
	// Stream is the body's "stream" flag (messages only).
	Stream bool
	// Prompt is the text of the last user message (messages only), and
	// ToolResult whether that message carried a tool_result.
	Prompt     string
	ToolResult bool
	// ToolError: that tool_result was an error (the tool was denied or failed).
	ToolError bool
	// Answer is what the fake answered: "tool_use: CMD", or its text.
	Answer string
	// APIKey is the request's x-api-key.
	APIKey string
	// Time is when the fake answered.
	Time time.Time
}

// bashLine finds the scripted tool request in a prompt.
var bashLine = regexp.MustCompile(`(?m)^bash: (.+)$`)

// bashCommand is the command of a bashLine match ("" for none).
func bashCommand(m []string) string {
	if m == nil {
		return ""
	}
	return m[1]
}

// NewFakeClaude starts the fake on a loopback port; Close stops it.
func NewFakeClaude() (*FakeClaude, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fakeclaude: %w", err)
	}
	f := &FakeClaude{URL: "http://" + ln.Addr().String(), ln: ln, asked: map[string]bool{}}
	f.srv = &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		_ = f.srv.Serve(ln)
	}()
	return f, nil
}

// StartFakeClaude starts the fake for the test and stops it when the test ends.
func StartFakeClaude(t interface {
	Helper()
	Fatal(...any)
	Cleanup(func())
}) *FakeClaude {
	t.Helper()
	f, err := NewFakeClaude()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// Close stops the server and waits for it.
func (f *FakeClaude) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := f.srv.Shutdown(ctx); err != nil {
		_ = f.srv.Close()
	}
	f.wg.Wait()
}

// Requests returns a copy of the requests answered so far.
func (f *FakeClaude) Requests() []FakeClaudeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]FakeClaudeRequest(nil), f.reqs...)
}

// messagesRequest is the part of a Messages API request the fake reads.
type messagesRequest struct {
	Model  string `json:"model"`
	Stream bool   `json:"stream"`
	// Tools: the CLI's side requests (a title for the session, …) offer none.
	Tools    []json.RawMessage `json:"tools"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

// contentBlock is one block of a message's content.
type contentBlock struct {
	Type    string          `json:"type"`
	Text    string          `json:"text"`
	IsError bool            `json:"is_error"`
	Content json.RawMessage `json:"content"`
}

func (f *FakeClaude) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	rec := FakeClaudeRequest{Method: r.Method, Path: r.URL.Path, APIKey: r.Header.Get("X-Api-Key")}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		f.keep(rec)
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/count_tokens") {
			_, _ = io.WriteString(w, `{"input_tokens":10}`)
			return
		}
		_, _ = io.WriteString(w, `{}`)
		return
	}
	var req messagesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, `{"type":"error","error":{"type":"invalid_request_error","message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	rec.Stream = req.Stream
	rec.Prompt, rec.ToolResult, rec.ToolError = lastUser(req)

	var blocks []map[string]any
	stop := "end_turn"
	var m []string // the last scripted line: the CLI may send earlier prompts along
	if all := bashLine.FindAllStringSubmatch(rec.Prompt, -1); len(all) > 0 {
		m = all[len(all)-1]
	}
	f.mu.Lock()
	// A command is asked for once: the CLI may send the next prompt in the
	// message that carries the last tool_result, and the tool_result of this
	// prompt's tool in a message that still carries the prompt.
	ask := m != nil && len(req.Tools) > 0 && !f.asked[m[1]]
	if ask {
		f.asked[m[1]] = true
	}
	f.mu.Unlock()
	switch {
	case ask:
		f.mu.Lock()
		f.seq++
		id := fmt.Sprintf("toolu_fake%04d", f.seq)
		f.mu.Unlock()
		blocks = []map[string]any{
			{"type": "text", "text": "Running it."},
			{"type": "tool_use", "id": id, "name": "Bash", "input": map[string]any{"command": strings.TrimSpace(bashCommand(m)), "description": "scripted command"}},
		}
		stop = "tool_use"
	case rec.ToolResult:
		cmd := f.lastCommand(req)
		word := "ran"
		if rec.ToolError {
			word = "denied"
		}
		blocks = []map[string]any{{"type": "text", "text": word + ": " + cmd}}
	default:
		first, _, _ := strings.Cut(strings.TrimSpace(rec.Prompt), "\n")
		blocks = []map[string]any{{"type": "text", "text": "FAKE-ANSWER: " + first}}
	}
	rec.Answer = "tool_use: " + strings.TrimSpace(bashCommand(m))
	if stop != "tool_use" {
		rec.Answer = blocks[0]["text"].(string)
	}
	f.keep(rec)
	model := req.Model
	if model == "" {
		model = "claude-fake"
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "msg_fake", "type": "message", "role": "assistant", "model": model,
			"content": blocks, "stop_reason": stop, "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": 10, "output_tokens": 5},
		})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fl, _ := w.(http.Flusher)
	send := func(event string, data map[string]any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
		if fl != nil {
			fl.Flush()
		}
	}
	send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_fake", "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": map[string]any{"input_tokens": 10, "output_tokens": 1},
	}})
	for i, b := range blocks {
		switch b["type"] {
		case "text":
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "text_delta", "text": b["text"]}})
		case "tool_use":
			in, _ := json.Marshal(b["input"])
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}})
			send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(in)}})
		}
		send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 5}})
	send("message_stop", map[string]any{"type": "message_stop"})
}

func (f *FakeClaude) keep(r FakeClaudeRequest) {
	r.Time = time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) < 10000 {
		f.reqs = append(f.reqs, r)
	}
}

// lastUser returns the text of the last user message, whether it carried a
// tool_result, and whether that result was an error.
func lastUser(req messagesRequest) (text string, toolResult, isError bool) {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		m := req.Messages[i]
		if m.Role != "user" {
			continue
		}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			return s, false, false
		}
		var blocks []contentBlock
		if err := json.Unmarshal(m.Content, &blocks); err != nil {
			return "", false, false
		}
		var texts []string
		for _, b := range blocks {
			switch b.Type {
			case "text":
				// The CLI puts its own reminders into the message as text blocks
				// (<system-reminder>…); the person's prompt is the rest.
				if !strings.HasPrefix(strings.TrimSpace(b.Text), "<system-reminder>") {
					texts = append(texts, b.Text)
				}
			case "tool_result":
				toolResult = true
				isError = isError || b.IsError
			}
		}
		return strings.Join(texts, "\n"), toolResult, isError
	}
	return "", false, false
}

// lastCommand returns the command of the last Bash tool_use in the conversation.
func (f *FakeClaude) lastCommand(req messagesRequest) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		m := req.Messages[i]
		if m.Role != "assistant" {
			continue
		}
		var blocks []struct {
			Type  string `json:"type"`
			Name  string `json:"name"`
			Input struct {
				Command string `json:"command"`
			} `json:"input"`
		}
		if json.Unmarshal(m.Content, &blocks) != nil {
			continue
		}
		for j := len(blocks) - 1; j >= 0; j-- {
			if blocks[j].Type == "tool_use" && blocks[j].Name == "Bash" {
				return blocks[j].Input.Command
			}
		}
	}
	return ""
}
