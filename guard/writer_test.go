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
		piece bool // asked as commands run before a line is accepted
	}{
		{"as typed", []typed{{op, "ls -l\r"}}, []string{"ls -l"}, []Writer{op}, false},
		{"in pieces", []typed{{op, "ls "}, {op, "-l"}, {op, "\r"}}, []string{"ls -l"}, []Writer{op}, false},
		{"injected", []typed{{op, "ls\r"}}, []string{"ls", "rm -rf ~"}, []Writer{op, {}}, false},
		{"injected while typing", []typed{{op, "ls\r"}}, []string{"rm Fls"}, []Writer{{}}, false},
		{"nothing typed", nil, []string{"true"}, []Writer{{}}, false},
		{"used once", []typed{{op, "true\r"}}, []string{"true", "true"}, []Writer{op, {}}, false},
		{"cursor moved", []typed{{op, "ouch x\x01t\r"}}, []string{"touch x"}, []Writer{op}, false},
		{"continuation lines", []typed{{op, "echo 'a\r"}, {op, "b'\r"}}, []string{"echo 'a\nb'"}, []Writer{op}, false},
		{"completed", []typed{{op, "ls /us\t\r"}}, []string{"ls /usr/"}, []Writer{op}, false},
		{"completion does not explain more", []typed{{op, "ls /us\t\r"}}, []string{"rm -r /usr/"}, []Writer{{}}, false},
		{"own history", []typed{{op, "make test\r"}, {op, "\x1b[A\r"}}, []string{"make test", "make test"}, []Writer{op, op}, false},
		{"another's history", []typed{{agent, "make test\r"}, {op, "\x1b[A\r"}}, []string{"make test", "make test"}, []Writer{agent, {}}, false},
		{"type-ahead in order", []typed{{op, "a\r"}, {agent, "b\r"}}, []string{"a", "b"}, []Writer{op, agent}, false},
		{"a piece of the line being typed (an expansion)", []typed{{op, "$(touch m)\x1b\x05"}}, []string{"touch m", "rm x"}, []Writer{op, {}}, true},
		{"an accepted line is no piece of the line being typed", []typed{{op, "echo later: touch x"}}, []string{"touch x"}, []Writer{{}}, false},
		{"lines typed into a program are dropped", []typed{{op, "secret\r"}, {agent, "b\r"}}, []string{"b", "secret"}, []Writer{agent, {}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &Session{}
			for _, ty := range c.typed {
				s.TypedInput(ty.w, []byte(ty.data))
			}
			for i, line := range c.asked {
				if got := s.LineWriter(line, c.piece); got != c.want[i] {
					t.Fatalf("line %q: writer %+v, want %+v", line, got, c.want[i])
				}
			}
		})
	}
}

// TestExpectedPiece: a command the shell runs before it accepted a line the node
// decided and typed (a run's `sudo -k; sudo id -u` reaching a shell whose first
// prompt was not armed yet) is a piece of that line, not an unknown writer's; an
// accepted line must match whole, and an expected line is not used up by a piece.
func TestExpectedPiece(t *testing.T) {
	s := &Session{}
	s.ExpectLine("sudo -k; sudo id -u")
	if !s.expectedPiece("sudo -k") || !s.expectedPiece(" sudo id -u ") {
		t.Fatal("a piece of an expected line is not expected")
	}
	if s.expectedPiece("rm -rf /") || s.expectedPiece("") {
		t.Fatal("a command in no expected line is expected")
	}
	if s.expected("sudo -k") {
		t.Fatal("an accepted line matched a piece of an expected one")
	}
	if !s.expected("sudo -k; sudo id -u") {
		t.Fatal("a piece used up the expected line")
	}
}
