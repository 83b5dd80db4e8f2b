package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/fleetmux/fleetmux/api"
)

// maxToolsListBytes bounds tools/list: every agent reads it at the start of a
// conversation. It was 28 KB; it is about 23.5 KB now, with the agent tools and
// exec, and room for catch_up.
const maxToolsListBytes = 25 << 10

// TestSchemasStrict: every tool's input and output schema, as a client gets
// them from tools/list, has no nullable type (a type array with "null", or an
// anyOf/oneOf branch of type null): strict validators (the MCP inspector's
// --strict, the OpenAPI subset of some model providers) refuse them or drop the
// constraint; so no required property is nullable either (send_keys' keys was).
// tools/list stays small.
func TestSchemasStrict(t *testing.T) {
	c := serve(t, &fake{}, Options{})
	res, err := c.cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tools/list: %d tools, %d bytes", len(res.Tools), len(raw))
	if len(raw) > maxToolsListBytes {
		t.Errorf("tools/list is %d bytes, over %d", len(raw), maxToolsListBytes)
	}
	for _, tl := range res.Tools {
		for _, which := range []string{"inputSchema", "outputSchema"} {
			s := tl.InputSchema
			if which == "outputSchema" {
				s = tl.OutputSchema
			}
			if s == nil {
				t.Errorf("%s: no %s", tl.Name, which)
				continue
			}
			b, _ := json.Marshal(s)
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			for _, p := range nullables(m, tl.Name+"."+which) {
				t.Errorf("nullable: %s", p)
			}
			if m["type"] != "object" {
				t.Errorf("%s.%s: type %v, want object", tl.Name, which, m["type"])
			}
		}
	}
	// The one the issue named: send_keys' keys is required and an array.
	for _, tl := range res.Tools {
		if tl.Name != "send_keys" {
			continue
		}
		b, _ := json.Marshal(tl.InputSchema)
		var s struct {
			Required   []string                  `json:"required"`
			Properties map[string]map[string]any `json:"properties"`
		}
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(s.Required, "keys") || s.Properties["keys"]["type"] != "array" {
			t.Errorf("send_keys input schema %s", b)
		}
	}
}

// nullables lists the paths in schema s (JSON, as decoded) where null is
// allowed (so a required property never is), and required names that are no
// property.
func nullables(s map[string]any, path string) []string {
	var bad []string
	switch ty := s["type"].(type) {
	case []any:
		for _, x := range ty {
			if x == "null" {
				bad = append(bad, fmt.Sprintf("%s: type %v", path, ty))
			}
		}
		if len(ty) != 1 {
			bad = append(bad, fmt.Sprintf("%s: a type array %v", path, ty))
		}
	case string:
		if ty == "null" {
			bad = append(bad, path+": type null")
		}
	}
	for _, k := range []string{"anyOf", "oneOf", "allOf", "prefixItems"} {
		l, _ := s[k].([]any)
		for i, sub := range l {
			if m, ok := sub.(map[string]any); ok {
				bad = append(bad, nullables(m, fmt.Sprintf("%s.%s[%d]", path, k, i))...)
			}
		}
	}
	for _, k := range []string{"items", "additionalProperties", "not"} {
		if m, ok := s[k].(map[string]any); ok {
			bad = append(bad, nullables(m, path+"."+k)...)
		}
	}
	props, _ := s["properties"].(map[string]any)
	for name, p := range props {
		if m, ok := p.(map[string]any); ok {
			bad = append(bad, nullables(m, path+"."+name)...)
		}
	}
	req, _ := s["required"].([]any)
	for _, r := range req {
		name, _ := r.(string)
		if _, ok := props[name]; !ok {
			bad = append(bad, fmt.Sprintf("%s: required %q is not a property", path, name))
		}
	}
	return bad
}

// TestEmptyListsNotNull: a required list in structured content is [] when
// empty, never null (the SDK validates structured content against the output
// schema, which says array: a null would turn the call into an error).
func TestEmptyListsNotNull(t *testing.T) {
	c := serve(t, &empty{}, Options{})
	for _, call := range []struct {
		tool string
		args map[string]any
		list string
	}{
		{"list_nodes", map[string]any{}, "nodes"},
		{"list_sessions", map[string]any{}, "sessions"},
		{"fanout_run", map[string]any{"command": "true", "all": true}, "results"},
	} {
		var out map[string]any
		text, isErr := c.call(call.tool, call.args, &out)
		if isErr {
			t.Errorf("%s: %s", call.tool, text)
			continue
		}
		if l, ok := out[call.list].([]any); !ok || len(l) != 0 {
			t.Errorf("%s: %s is %#v, want []", call.tool, call.list, out[call.list])
		}
	}
}

// empty is a fake Fleet with no nodes and no sessions.
type empty struct{ fake }

func (*empty) Nodes(context.Context) (api.NodeList, error) { return api.NodeList{}, nil }

func (*empty) Sessions(context.Context, api.SessionFilter) (api.SessionList, error) {
	return api.SessionList{}, nil
}
