package api

import (
	"fmt"
	"strings"
)

// ParseLabels parses KEY=VALUE pairs (repeated --label flags, ?label= queries) into
// labels that ValidLabels accepts; none gives nil. A later pair overrides an earlier
// one with the same key. An error names the pair.
func ParseLabels(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("label %s: want KEY=VALUE, KEY a name (%w)", quote(kv), ErrBadName)
		}
		if err := ValidLabels(map[string]string{k: v}); err != nil {
			return nil, fmt.Errorf("label %s: %w", quote(kv), err)
		}
		out[k] = v
	}
	if err := ValidLabels(out); err != nil {
		return nil, err
	}
	return out, nil
}
