// Package bench holds fleetmux's performance benchmarks; it has no non-test code.
//
// The benchmarks put a session.Session side by side with the best a client can do
// without fleetmux, in the same run on the same machine:
//
//   - BenchmarkRoundTrip: submit a trivial command and wait until it is known to be
//     done. session: Session.Run("true") in a bash session with shell integration;
//     rawpty: a raw PTY running bash, typing `echo M$((N+1))` and reading until its
//     output appears; tmux: a private tmux server driven the way agents drive tmux
//     (send-keys, then `tmux wait-for` on a channel the command signals).
//   - BenchmarkThroughput: a command printing 32 MB of lines, from submission until
//     all of its output has been read (session, session+screen, rawpty).
//
// The node (node_bench_test.go), the controller's API and fan-out
// (controller_bench_test.go) and the SSH front door (sshfront_bench_test.go) are
// measured the same way, next to raw PTY, tmux and OpenSSH.
//
// TestBenchReport, TestControllerBenchReport and TestSSHBenchReport (run with
// FLEETMUX_BENCH_REPORT=1) run the variants interleaved and print the markdown
// tables kept in README.md. See README.md for the commands.
package bench
