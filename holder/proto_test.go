package holder

import "testing"

// FuzzParseChunk: no stream message makes the parser panic or give a negative
// offset.
func FuzzParseChunk(f *testing.F) {
	f.Add(byte('O'), []byte("\x00\x00\x00\x00\x00\x00\x00\x05hi"))
	f.Add(byte('X'), []byte(`{"code":7,"end":12}`))
	f.Add(byte('X'), []byte(`{"end":-1}`))
	f.Fuzz(func(t *testing.T, kind byte, body []byte) {
		ch, err := parseChunk(kind, body)
		if err == nil && ch.Off < 0 {
			t.Fatalf("negative offset %d", ch.Off)
		}
	})
}
