package guard

import "testing"

// TestLineWriter: a line the shell asks about is the writer's whose input formed
// it: typed as is, edited with cursor keys, over continuation lines, completed,
// recalled from their own history; a line no writer's input explains (a program
// typed it into the terminal) is nobody's.
func TestLineWriter(t *testing.T) {
	op := Writer{Principal: "token:op2", Role: "operator"}
	agent := Writer{Principal: "token:agent", Role: "operator"}
	type typed struct {
		w    Writer
		data string
	}
	for _, c := range []struct {
		name  string
		typed []typed
		asked []string
		want  []Writer
	}{
		{"as typed", []typed{{op, "ls -l\r"}}, []string{"ls -l"}, []Writer{op}},
		{"in pieces", []typed{{op, "ls "}, {op, "-l"}, {op, "\r"}}, []string{"ls -l"}, []Writer{op}},
		{"injected", []typed{{op, "ls\r"}}, []string{"ls", "rm -rf ~"}, []Writer{op, {}}},
		{"injected while typing", []typed{{op, "ls\r"}}, []string{"rm Fls"}, []Writer{{}}},
		{"nothing typed", nil, []string{"true"}, []Writer{{}}},
		{"used once", []typed{{op, "true\r"}}, []string{"true", "true"}, []Writer{op, {}}},
		{"cursor moved", []typed{{op, "ouch x\x01t\r"}}, []string{"touch x"}, []Writer{op}},
		{"continuation lines", []typed{{op, "echo 'a\r"}, {op, "b'\r"}}, []string{"echo 'a\nb'"}, []Writer{op}},
		{"completed", []typed{{op, "ls /us\t\r"}}, []string{"ls /usr/"}, []Writer{op}},
		{"completion does not explain more", []typed{{op, "ls /us\t\r"}}, []string{"rm -r /usr/"}, []Writer{{}}},
		{"own history", []typed{{op, "make test\r"}, {op, "\x1b[A\r"}}, []string{"make test", "make test"}, []Writer{op, op}},
		{"another's history", []typed{{agent, "make test\r"}, {op, "\x1b[A\r"}}, []string{"make test", "make test"}, []Writer{agent, {}}},
		{"type-ahead in order", []typed{{op, "a\r"}, {agent, "b\r"}}, []string{"a", "b"}, []Writer{op, agent}},
		{"a piece of the line being typed (an expansion)", []typed{{op, "$(touch m)\x1b\x05"}}, []string{"touch m", "rm x"}, []Writer{op, {}}},
		{"lines typed into a program are dropped", []typed{{op, "secret\r"}, {agent, "b\r"}}, []string{"b", "secret"}, []Writer{agent, {}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &Session{}
			for _, ty := range c.typed {
				s.TypedInput(ty.w, []byte(ty.data))
			}
			for i, line := range c.asked {
				if got := s.LineWriter(line); got != c.want[i] {
					t.Fatalf("line %q: writer %+v, want %+v", line, got, c.want[i])
				}
			}
		})
	}
}
