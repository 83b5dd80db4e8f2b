package agent

import (
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

func TestMachineReconciles(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sig := func(src, state string, ms int) api.AgentSignal {
		return api.AgentSignal{Source: src, State: state, Evidence: src + " " + state, Time: at(ms)}
	}
	type step struct {
		sig  *api.AgentSignal // nil: reconcile only
		now  int
		want string
		src  string
		intr bool // an interrupt typed at now
		ansd bool // a permission request answered at now
	}
	s := func(sg api.AgentSignal, now int, want, src string) step {
		return step{&sg, now, want, src, false, false}
	}
	tick := func(now int, want, src string) step { return step{nil, now, want, src, false, false} }
	interrupt := func(now int, want, src string) step { return step{nil, now, want, src, true, false} }
	answered := func(now int, want, src string) step { return step{nil, now, want, src, false, true} }
	cases := []struct {
		name  string
		steps []step
	}{
		{"screen alone", []step{
			s(sig(api.SourceProcess, api.AgentBooting, 0), 0, api.AgentBooting, api.SourceProcess),
			s(sig(api.SourceScreen, api.AgentReady, 100), 300, api.AgentReady, api.SourceScreen),
			s(sig(api.SourceScreen, api.AgentWorking, 400), 600, api.AgentWorking, api.SourceScreen),
			s(sig(api.SourceScreen, api.AgentWaitingPermission, 700), 900, api.AgentWaitingPermission, api.SourceScreen),
		}},
		{"a hook confirms what the screen said first", []step{
			s(sig(api.SourceScreen, api.AgentReady, 100), 300, api.AgentReady, api.SourceScreen),
			s(sig(api.SourceHook, api.AgentReady, 350), 350, api.AgentReady, api.SourceHook),
		}},
		{"the hook wins over an older screen", []step{
			s(sig(api.SourceScreen, api.AgentReady, 100), 300, api.AgentReady, api.SourceScreen),
			s(sig(api.SourceHook, api.AgentWorking, 400), 400, api.AgentWorking, api.SourceHook),
			tick(500, api.AgentWorking, api.SourceHook), // the screen still shows ready since 100
		}},
		{"a dialog on the screen beats a stale working hook", []step{
			s(sig(api.SourceHook, api.AgentWorking, 100), 100, api.AgentWorking, api.SourceHook),
			// (first, a moment for the hook that may come with it)
			s(sig(api.SourceScreen, api.AgentWaitingPermission, 500), 700, api.AgentWorking, api.SourceHook),
			tick(500+int(DialogGrace/time.Millisecond), api.AgentWaitingPermission, api.SourceScreen),
			// answered: the hook says working again, after the dialog appeared
			s(sig(api.SourceHook, api.AgentWorking, 900), 900, api.AgentWorking, api.SourceHook),
		}},
		{"a fresh hook beats a newer non-dialog screen", []step{
			s(sig(api.SourceHook, api.AgentWorking, 100), 100, api.AgentWorking, api.SourceHook),
			s(sig(api.SourceScreen, api.AgentReady, 500), 700, api.AgentWorking, api.SourceHook),
		}},
		{"a silent hook falls back to the screen", []step{
			s(sig(api.SourceHook, api.AgentWorking, 100), 100, api.AgentWorking, api.SourceHook),
			s(sig(api.SourceScreen, api.AgentReady, 500), 700, api.AgentWorking, api.SourceHook),
			tick(100+int(DefaultFresh/time.Millisecond)+1, api.AgentReady, api.SourceScreen),
		}},
		{"the dialog of a request the hook answered is no waiting_permission", []step{
			s(sig(api.SourceHook, api.AgentWaitingPermission, 100), 100, api.AgentWaitingPermission, api.SourceHook),
			answered(150, api.AgentWaitingPermission, api.SourceHook),
			s(sig(api.SourceHook, api.AgentWorking, 150), 150, api.AgentWorking, api.SourceHook),
			s(sig(api.SourceScreen, api.AgentWaitingPermission, 300), 500, api.AgentWorking, api.SourceHook),
			// a dialog first seen well after the answer is a new one
			s(sig(api.SourceScreen, api.AgentWorking, 600), 800, api.AgentWorking, api.SourceHook),
			s(sig(api.SourceScreen, api.AgentWaitingPermission, 150+int(DialogSettle/time.Millisecond)+100), 150+int(DialogSettle/time.Millisecond)+300, api.AgentWorking, api.SourceHook),
			tick(150+int((DialogSettle+DialogGrace)/time.Millisecond)+100, api.AgentWaitingPermission, api.SourceScreen),
		}},
		{"interrupted: the screen since the interrupt wins over a fresh hook", []step{
			s(sig(api.SourceScreen, api.AgentWorking, 100), 300, api.AgentWorking, api.SourceScreen),
			s(sig(api.SourceHook, api.AgentWaitingPermission, 400), 400, api.AgentWaitingPermission, api.SourceHook),
			s(sig(api.SourceScreen, api.AgentWaitingPermission, 500), 700, api.AgentWaitingPermission, api.SourceHook),
			interrupt(800, api.AgentWaitingPermission, api.SourceHook), // the screen has not changed yet
			s(sig(api.SourceScreen, api.AgentReady, 900), 1100, api.AgentReady, api.SourceScreen),
			// a hook after the interrupt is believed again
			s(sig(api.SourceHook, api.AgentWorking, 1200), 1200, api.AgentWorking, api.SourceHook),
		}},
		{"interrupted, the screen unchanged: the hook stays", []step{
			s(sig(api.SourceScreen, api.AgentReady, 100), 300, api.AgentReady, api.SourceScreen),
			s(sig(api.SourceHook, api.AgentWorking, 400), 400, api.AgentWorking, api.SourceHook),
			interrupt(500, api.AgentWorking, api.SourceHook),
			s(sig(api.SourceScreen, api.AgentReady, 100), 700, api.AgentWorking, api.SourceHook),  // still since 100
			tick(500+int(InterruptSettle/time.Millisecond)+100, api.AgentWorking, api.SourceHook), // no sample since
		}},
		{"interrupted, the screen unchanged once settled: what came of it", []step{
			s(sig(api.SourceScreen, api.AgentReady, 100), 300, api.AgentReady, api.SourceScreen),
			s(sig(api.SourceHook, api.AgentWaitingPermission, 400), 400, api.AgentWaitingPermission, api.SourceHook),
			interrupt(500, api.AgentWaitingPermission, api.SourceHook),
			s(sig(api.SourceScreen, api.AgentReady, 100), 500+int(InterruptSettle/time.Millisecond), api.AgentReady, api.SourceScreen),
			// a hook after the interrupt is believed again
			s(sig(api.SourceHook, api.AgentWorking, 2000), 2000, api.AgentWorking, api.SourceHook),
			// and the screen's ready from before it is no news
			s(sig(api.SourceScreen, api.AgentReady, 100), 2300, api.AgentWorking, api.SourceHook),
		}},
		{"exited from the process wins and stays", []step{
			s(sig(api.SourceHook, api.AgentWorking, 100), 100, api.AgentWorking, api.SourceHook),
			s(sig(api.SourceProcess, api.AgentExited, 200), 200, api.AgentExited, api.SourceProcess),
			s(sig(api.SourceHook, api.AgentReady, 300), 300, api.AgentExited, api.SourceProcess),
			s(sig(api.SourceScreen, api.AgentReady, 300), 500, api.AgentExited, api.SourceProcess),
		}},
		{"unknown words are ignored", []step{
			s(api.AgentSignal{Source: "rumour", State: api.AgentReady, Time: at(1)}, 1, api.AgentSpawning, api.SourceProcess),
			s(api.AgentSignal{Source: api.SourceHook, State: "dancing", Time: at(1)}, 1, api.AgentSpawning, api.SourceProcess),
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := NewMachine(t0, 0)
			for i, st := range c.steps {
				switch {
				case st.intr:
					m.Interrupt(at(st.now), at(st.now))
				case st.ansd:
					m.Answered(at(st.now))
				case st.sig != nil:
					m.Apply(*st.sig, at(st.now))
				default:
					m.Reconcile(at(st.now))
				}
				if got := m.State(); got.State != st.want || got.Source != st.src {
					t.Fatalf("step %d: state %s from %s, want %s from %s", i, got.State, got.Source, st.want, st.src)
				}
			}
		})
	}
}
