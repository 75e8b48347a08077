package leadership

// Term identifies one term of leadership of a flag: the flag's name, the
// holder (the process name of the flag that won it) and the version, the
// fencing token. Two terms of one flag never share a version.
//
// A Term is what the stores' Fence functions check a transaction against:
// the transaction commits only if the flag's row still names this holder
// and this version, and no later term can start before it has committed
// or rolled back. A Term is a [Leader] of itself, so a job can pin all its
// transactions to the term it started in (as a shell job run by
// `leadership run` does with LEADERSHIP_NAME, LEADERSHIP_HOLDER and
// LEADERSHIP_TOKEN); pass the [*Flag] itself to fence with whatever term
// it leads at the moment, and only while it is raised.
type Term struct {
	Name    string
	Holder  string
	Version int64
}

// Term returns t and whether it can name a term at all (a holder and a
// positive version): a Term is a [Leader] of itself.
func (t Term) Term() (Term, bool) {
	return t, t.Name != "" && t.Holder != "" && t.Version > 0
}

// Leader is what a transaction is fenced with: anything that reports the
// term it leads, and false when it leads none. [*Flag] and [Term] are
// Leaders.
type Leader interface {
	Term() (Term, bool)
}

var _ Leader = (*Flag)(nil)

// Term returns the term this process leads, and true while the flag is
// raised (the same condition as [Flag.Token], whose value is the term's
// Version); or a zero Term and false. Fencing a transaction with the flag
// (a store's Fence function) asks it at the moment of the fence, so a
// flag that is no longer raised fails the fence at once, without asking
// the database.
func (f *Flag) Term() (Term, bool) {
	version, ok := f.Token()
	if !ok {
		return Term{}, false
	}
	return Term{Name: f.c.name, Holder: f.c.process, Version: version}, true
}
