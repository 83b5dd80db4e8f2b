package sandbox

// WrapJoining is WrapIn without Fits: the wrapper is told to join ns whatever
// the node would check first (a check that raced a change).
func WrapJoining(ns *Namespace, spec Spec, argv []string) (*Wrapped, error) {
	spec.Prepared = ns.marks
	w, err := Wrap("", spec, argv)
	if err != nil {
		return nil, err
	}
	w.Child = append(w.Child, ns.dup())
	return w, nil
}
