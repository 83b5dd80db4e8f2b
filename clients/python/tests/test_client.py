"""Tests of the fleetmux Python client against a real controller.

The Go test TestPythonClient (cmd/fleetmux/clients_test.go) starts `fleetmux dev` and
a second controller, and runs these against that controller with FLEETMUX_ADDR and
FLEETMUX_TOKEN set, and FLEETMUX_TEST_CONTROL: a URL whose GET /restart restarts that
controller (the node and its sessions live on), /node2/start and /node2/stop start and
stop a second node, /disk/break and /disk/fix make the dev node's next session
directory unusable and usable again. Without FLEETMUX_ADDR they skip.
"""

import json
import os
import re
import shutil
import tempfile
import threading
import time
import unittest
import urllib.request

import fleetmux
from fleetmux import Client

ADDR = os.environ.get("FLEETMUX_ADDR")
CONTROL = os.environ.get("FLEETMUX_TEST_CONTROL")


# The error codes the controller under test answered, written to FLEETMUX_TEST_CODES
# once the tests ran (the harness checks that each of the API's codes is there).
SEEN_CODES = set()
_request = Client._request


def _recording_request(self, *args, **kwargs):
    try:
        return _request(self, *args, **kwargs)
    except fleetmux.FleetmuxError as e:
        if e.status and ADDR and self.addr == fleetmux.resolve(ADDR, "-")[0]:
            SEEN_CODES.add(e.code)
        raise


Client._request = _recording_request  # type: ignore[method-assign]


def tearDownModule():
    path = os.environ.get("FLEETMUX_TEST_CODES")
    if path:
        with open(path, "w") as f:
            f.write("".join(c + "\n" for c in sorted(SEEN_CODES)))


def control(what):
    """Asks the harness for a change of the fleet under test; returns its answer."""
    with urllib.request.urlopen(CONTROL + "/" + what, timeout=60) as r:
        return r.read().decode().strip()


def eventually(what, fn, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


@unittest.skipUnless(ADDR, "FLEETMUX_ADDR not set (run through go test ./clients)")
class ClientTest(unittest.TestCase):
    def setUp(self):
        self.c = Client()
        self.s = self.c.create_session(title="py", labels={"lang": "python"})
        self.assertTrue(self.c.wait(self.s.node, self.s.id, until="idle", timeout_ms=15000).ok)

    def tearDown(self):
        try:
            self.c.close_session(self.s.node, self.s.id)
        except fleetmux.NotFound:
            pass

    def test_create_and_run_exit_code(self):
        s = self.s
        self.assertTrue(s.node and s.id and s.title == "py")
        self.assertEqual(self.c.session(s.node, s.id).labels, {"lang": "python"})
        r = self.c.run(s.node, s.id, "echo hi; (exit 3)", timeout_ms=20000)
        self.assertEqual(r.block.exit_code, 3)
        self.assertEqual(r.block.state, "done")
        self.assertEqual(r.block.n, 1)
        self.assertEqual(r.text, "hi")
        self.assertEqual(r.omitted_bytes, 0)
        self.assertEqual(r.session.state, "idle")
        self.assertEqual(r.session.last_exit_code, 3)
        self.assertEqual([b.n for b in self.c.blocks(s.node, s.id)], [1])
        self.assertIn(s.id, [x.id for x in self.c.sessions(node=s.node, labels={"lang": "python"}).sessions])
        self.assertEqual(self.c.update_session(s.node, s.id, title="py2").title, "py2")
        self.assertEqual(self.c.resize(s.node, s.id, 100, 30).cols, 100)
        self.assertTrue(any(n.name == s.node and n.status == "alive" for n in self.c.nodes()))
        self.assertIn("openapi: 3.1", self.c.openapi())

    def test_agent(self):
        # A tiny TUI under the generic driver: ready from its screen, prompted,
        # read, killed.
        c = self.c
        a = c.spawn_agent("generic", node=self.s.node, program="sh", args=["-c", "printf 'READY> '; exec cat"],
                          rules="version 1\nrule prompt ready -- READY>\n")
        self.assertEqual((a.driver, a.depth, a.rules), ("generic", 1, "generic"))
        w = c.wait_agent(a.node, a.id, states=["ready"], timeout_ms=10000)
        self.assertTrue(w.ok, w.agent)
        self.assertEqual(w.agent.state_source, "screen")
        self.assertIn(a.address, [x.address for x in c.agents().agents])
        self.assertEqual(c.send_agent(a.node, a.id, "hello agent").id, a.id)
        # The terminal echoes the line, then cat prints it: both on the screen.
        out = eventually("the prompt echoed and printed",
                         lambda: (lambda o: o if o.screen.count("hello agent") == 2 else None)(c.agent_output(a.node, a.id)))
        self.assertIn("hello agent", out.text)
        self.assertGreater(out.cursor, 0)
        self.assertEqual(c.agent_output(a.node, a.id, cursor=out.cursor).text, "")
        self.assertEqual(c.kill_agent(a.node, a.id).state, "exited")
        with self.assertRaises(fleetmux.NotFound):
            c.agent(a.node, a.id)

    def test_big_output_budget_and_paging(self):
        s = self.s
        # seq 1 700000 prints 4.8 MB (5 MB with the terminal's CRs).
        r = self.c.run(s.node, s.id, "seq 1 700000", timeout_ms=60000)
        self.assertEqual(r.block.exit_code, 0)
        self.assertGreater(r.block.end - r.block.start, 5_000_000)
        self.assertGreater(r.omitted_bytes, 4_000_000)
        self.assertTrue(r.text.startswith("1\n2\n3\n"), r.text[:20])
        self.assertTrue(r.text.endswith("699999\n700000"), r.text[-20:])
        # Lines paged by offset/limit, and grep.
        page = self.c.block(s.node, s.id, r.block.n, offset=1000, limit=3)
        self.assertEqual(page.text.split("\n"), ["1001", "1002", "1003"])
        g = self.c.block(s.node, s.id, r.block.n, grep="^12345[0-9]$")
        self.assertEqual(len(g.text.split("\n")), 10)
        # Raw bytes paged by offset, gap-free to the block's end.
        got, off = 0, r.block.start
        while off < r.block.end:
            ch = self.c.output(s.node, s.id, from_=off, max_bytes=min(1 << 20, r.block.end - off))
            self.assertEqual(ch.offset, off)
            self.assertTrue(ch.data)
            off += len(ch.data)
            got += len(ch.data)
        self.assertEqual(got, r.block.end - r.block.start)
        # The recording (read by the controller in many pieces, its oldest parts
        # perhaps dropped by the quota) ends with the block's output; the recorder
        # writes on its own, so wait for it.
        deadline = time.monotonic() + 20
        while True:
            rec = self.c.recording(s.node, s.id)
            if b"699999\\r\\n700000" in rec or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.assertTrue(rec.startswith(b'{"version":3,'), rec[:40])
        self.assertTrue(b"699999\\r\\n700000" in rec, "the recording lacks the block's end")
        self.assertTrue(self.c.recording(s.node, s.id, format="v2").startswith(b'{"version":2,'))

    def test_wait_for_input(self):
        s = self.s
        r = self.c.run(s.node, s.id, "read -r name; echo hello-$name", timeout_ms=200)
        self.assertEqual(r.block.state, "running")
        w = self.c.wait(s.node, s.id, until="waiting_input", timeout_ms=15000)
        self.assertTrue(w.ok)
        self.assertEqual(w.session.state, "waiting_input")
        self.c.input(s.node, s.id, "bob\n")
        w = self.c.wait(s.node, s.id, until="idle", timeout_ms=15000)
        self.assertTrue(w.ok)
        self.assertEqual(w.block.exit_code, 0)
        self.assertIn("hello-bob", w.text)

    def test_screen_of_vim(self):
        if os.environ.get("FLEETMUX_TEST_NO_VIM"):
            self.skipTest("vim not installed")
        s = self.s
        self.c.input(s.node, s.id, "vim -u NONE -N\n")
        scr = eventually("vim's screen", lambda: (lambda x: x if x.alt_screen and "~" in x.text else None)(
            self.c.screen(s.node, s.id)))
        self.assertEqual(scr.rows, self.c.session(s.node, s.id).rows)
        self.c.keys(s.node, s.id, "Esc")
        self.c.input(s.node, s.id, ":q!\r")
        eventually("vim to quit", lambda: not self.c.screen(s.node, s.id).alt_screen)
        self.assertTrue(self.c.wait(s.node, s.id, until="idle", timeout_ms=15000).ok)

    def test_fanout(self):
        s = self.s
        f = self.c.fanout("echo fan-$((40+2))", sessions=[s.address], timeout_ms=20000)
        self.assertEqual((f.ok, f.failed), (1, 0))
        self.assertEqual(f.results[0].text, "fan-42")
        self.assertEqual(f.results[0].block.exit_code, 0)
        self.assertIsNone(f.results[0].error)
        f = self.c.fanout("exit 5", sessions=[s.address], timeout_ms=20000)
        self.assertEqual((f.ok, f.failed), (0, 1))
        self.assertEqual(f.results[0].error.code, "exit_status")

    def test_exec_and_digest(self):
        s = self.s
        r = self.c.exec(s.node, command="echo out; echo err >&2; exit 4")
        self.assertEqual((r.stdout, r.stderr, r.exit_code, r.state), ("out\n", "err\n", 4, "done"))
        f = self.c.exec(argv=["true"], all=True)
        self.assertGreaterEqual(f.ok, 1)
        b = self.c.exec(s.node, command="echo bg; sleep 30", background=True, timeout_ms=1)
        self.assertEqual(b.state, "running")
        self.assertEqual(self.c.get_exec(s.node, b.exec_id).exec_id, b.exec_id)
        deadline = time.monotonic() + 10  # its output first: a kill may come before the echo
        while self.c.exec_output(s.node, b.exec_id).data != "bg\n":
            self.assertLess(time.monotonic(), deadline, "the background exec's output")
            time.sleep(0.01)
        self.assertEqual(self.c.kill_exec(s.node, b.exec_id).signal, "SIGKILL")
        self.assertEqual(self.c.wait_exec(s.node, b.exec_id, timeout_ms=1000).state, "done")
        self.assertEqual(self.c.exec_output(s.node, b.exec_id).data, "bg\n")
        d = self.c.digest(budget_tokens=500)
        self.assertLessEqual(d.tokens, 500)
        self.assertTrue(d.next.startswith("c"))

    def test_follow_across_restart(self):
        if not CONTROL:
            self.skipTest("FLEETMUX_TEST_CONTROL not set")
        s = self.s
        start = self.c.session(s.node, s.id).output_offset
        self.c.run(s.node, s.id, "for i in $(seq 1 300); do echo line-$i; sleep 0.005; done; exit", timeout_ms=50)
        buf = b""
        restarts = 0
        deadline = time.monotonic() + 40
        for ch in self.c.follow(s.node, s.id, from_=start):
            self.assertEqual(ch.offset, start + len(buf))
            buf += ch.data
            if restarts == 0 and b"line-20\r\n" in buf:
                control("restart")
                restarts += 1
            self.assertLess(time.monotonic(), deadline, "follow did not end")
        # The session exited: follow ended after its last byte, each line once, in order.
        lines = re.findall(r"line-(\d+)\r\n", buf.decode())
        self.assertEqual(lines, [str(i) for i in range(1, 301)])
        self.assertEqual(restarts, 1)
        end = self.c.session(s.node, s.id).output_offset
        self.assertEqual(start + len(buf), end)

    def test_readme_agent_loop(self):
        # The README's loop, with a build that fails.
        c, s = self.c, self.s
        r = c.run(s.node, s.id, "for i in $(seq 1 3000); do echo compiling $i; done; echo 'main.c:3: error: boom'; (exit 2)",
                  timeout_ms=30000)
        if r.block.state == "running":
            r = c.wait(s.node, s.id, until="idle", timeout_ms=30000)
        self.assertEqual(r.block.exit_code, 2)
        self.assertGreater(r.omitted_bytes, 0)
        self.assertTrue(r.text.endswith("main.c:3: error: boom"), r.text[-100:])
        errors = c.block(s.node, s.id, r.block.n, grep=r"error|FAIL", max_bytes=-1)
        self.assertEqual(errors.text.splitlines(), ["3001: main.c:3: error: boom"])

    def test_errors(self):
        s, c = self.s, self.c
        with self.assertRaises(fleetmux.NotFound) as e:
            c.session(s.node, "nope")
        self.assertEqual((e.exception.code, e.exception.status), ("not_found", 404))
        with self.assertRaises(fleetmux.BadRequest):
            c.block(s.node, s.id, 0)
        with self.assertRaises(fleetmux.BadRequest):
            c.session(s.node, "bad name")  # checked before sending
        with self.assertRaises(fleetmux.Unauthorized):
            Client(token="wrong").nodes()
        with self.assertRaises(fleetmux.TooLarge):
            c.input(s.node, s.id, "x" * (2 << 20))
        r = c.run(s.node, s.id, "sleep 5", timeout_ms=50)
        self.assertEqual(r.block.state, "running")
        with self.assertRaises(fleetmux.Busy) as e:
            c.run(s.node, s.id, "true")
        self.assertEqual(e.exception.status, 409)
        c.keys(s.node, s.id, "C-c")
        self.assertEqual(c.wait(s.node, s.id, until="idle", timeout_ms=15000).block.exit_code, 130)
        # Tokens: a viewer may read, not run; a name is taken once.
        name = "py-viewer-%d" % os.getpid()
        t = c.create_token(name, "viewer", ttl="1h")
        self.assertTrue(t.secret)
        with self.assertRaises(fleetmux.Exists):
            c.create_token(name, "viewer")
        self.assertIn(name, [x.name for x in c.tokens()])
        viewer = Client(token=t.secret)
        self.assertEqual(viewer.session(s.node, s.id).id, s.id)
        with self.assertRaises(fleetmux.Forbidden):
            viewer.run(s.node, s.id, "true")
        c.revoke_token(name)
        with self.assertRaises(fleetmux.Unauthorized):
            viewer.nodes()
        # A program that exits: the session refuses commands.
        e2 = c.create_session(argv=["sh", "-c", "exit 0"])
        self.assertTrue(c.wait(e2.node, e2.id, until="exited", timeout_ms=15000).ok)
        with self.assertRaises(fleetmux.Exited):
            c.run(e2.node, e2.id, "true")
        c.close_session(e2.node, e2.id)
        self.assertEqual(c.health().status, "ok")

    def test_gone(self):
        # About 11 MB: more than the 8 MiB scrollback and the two 1 MiB parts of the
        # recording that the harness's node keeps.
        c, s = self.c, self.s
        r = c.run(s.node, s.id, "seq 1 1500000", timeout_ms=60000, max_output_bytes=1000)
        self.assertEqual(r.block.exit_code, 0)
        with self.assertRaises(fleetmux.Gone) as e:
            c.output(s.node, s.id, from_=0)
        self.assertEqual((e.exception.code, e.exception.status), ("gone", 410))
        with self.assertRaises(fleetmux.Gone):
            next(c.follow(s.node, s.id, from_=1))
        # What is still held is served: from the oldest offset on.
        oldest = c.output(s.node, s.id, from_=r.block.end).oldest
        self.assertTrue(0 < oldest < r.block.end, oldest)
        self.assertEqual(c.output(s.node, s.id, from_=oldest, max_bytes=10).offset, oldest)

    @unittest.skipUnless(CONTROL, "FLEETMUX_TEST_CONTROL not set")
    def test_unavailable(self):
        c = self.c
        node2 = control("node2/start")
        t = c.create_session(node=node2, title="on-node2")
        self.assertEqual(c.run(t.node, t.id, "echo up", timeout_ms=20000).text, "up")
        control("node2/stop")
        # The node is gone: requests to it fail at once, whether the controller has
        # heard of it from gossip yet or not.
        with self.assertRaises(fleetmux.Unavailable) as e:
            c.session(t.node, t.id)
        self.assertEqual((e.exception.code, e.exception.status), ("unavailable", 503))
        self.assertIn(node2, e.exception.message)
        with self.assertRaises(fleetmux.Unavailable):
            c.run(t.node, t.id, "true")

    def test_timeout(self):
        # A program that never reads its terminal: the node cannot type 256 KB of
        # lines into it, and the controller stops waiting for the node's answer.
        c, s = self.c, self.s
        p = c.create_session(node=s.node, argv=["sleep", "60"])
        try:
            with self.assertRaises(fleetmux.Timeout) as e:
                c.input(p.node, p.id, ("x" * 63 + "\n") * 4000)
            self.assertEqual((e.exception.code, e.exception.status), ("timeout", 504))
        finally:
            c.close_session(p.node, p.id)  # answered: the node is no longer suspect

    @unittest.skipUnless(CONTROL, "FLEETMUX_TEST_CONTROL not set")
    def test_internal(self):
        # The node's data dir cannot take the new session's recording: the node
        # fails the request and keeps the details for its log.
        c, s = self.c, self.s
        control("disk/break")
        try:
            with self.assertRaises(fleetmux.Internal) as e:
                c.create_session(node=s.node, argv=["sleep", "60"])
            self.assertEqual((e.exception.code, e.exception.status), ("internal", 500))
            self.assertIn("details in its log", e.exception.message)
            self.assertNotIn("not a directory", e.exception.message)
        finally:
            control("disk/fix")
        made = c.create_session(node=s.node, argv=["sleep", "60"])
        c.close_session(made.node, made.id)

    def test_take_over(self):
        # One writer per session: while A's command runs, B is busy until it takes
        # the session over; then A is the one who is busy.
        c, s = self.c, self.s
        names = ["py-a-%d" % os.getpid(), "py-b-%d" % os.getpid()]
        a, b = (Client(token=c.create_token(n, "operator", ttl="1h").secret) for n in names)
        for n in names:
            self.addCleanup(c.revoke_token, n)
        self.assertEqual(a.run(s.node, s.id, "sleep 30", timeout_ms=50).block.state, "running")
        with self.assertRaises(fleetmux.Busy) as e:
            b.keys(s.node, s.id, "C-c")
        self.assertIn("token:" + names[0], e.exception.message)
        t = b.take_over(s.node, s.id)
        self.assertEqual((t.session.id, t.previous.principal, t.previous.role), (s.id, "token:" + names[0], "operator"))
        b.keys(s.node, s.id, "C-c")
        self.assertEqual(c.wait(s.node, s.id, until="idle", timeout_ms=15000).block.exit_code, 130)
        with self.assertRaises(fleetmux.Busy) as e:
            a.run(s.node, s.id, "true")
        self.assertIn("token:" + names[1], e.exception.message)

    def test_policy_denies(self):
        c, s = self.c, self.s
        doc = ("version: 1\n"
               "rules:\n"
               "  - name: no-py-marker\n"
               "    match: {command: 'fm-deny-py'}\n"
               "    action: deny\n"
               "  - name: default\n"
               "    action: allow\n")
        before = c.policy()
        info = c.set_policy(doc)
        try:
            self.assertGreater(info.version, before.version)
            self.assertEqual((info.document, info.rules, info.redacts), (doc, 2, 0))
            self.assertEqual(c.policy().version, info.version)
            # Each node applies it within a second: a harmless command that the
            # rule matches is denied once it did.
            probe = lambda: self._denied(lambda: c.run(s.node, s.id, "echo fm-deny-py", timeout_ms=20000))
            e = eventually("the node to apply the policy", probe, timeout=10)
            self.assertEqual((e.code, e.status, e.rule), ("denied", 403, "no-py-marker"))
            self.assertIsInstance(e, fleetmux.Forbidden)
            marker = os.path.join(self.tmp(), "fm-deny-py")
            with self.assertRaises(fleetmux.Denied) as d:
                c.run(s.node, s.id, "touch " + marker, timeout_ms=20000)
            self.assertEqual(d.exception.rule, "no-py-marker")
            f = c.fanout("touch " + marker, sessions=[s.address], timeout_ms=20000)
            self.assertEqual((f.ok, f.failed), (0, 1))
            self.assertEqual((f.results[0].error.code, f.results[0].error.rule), ("denied", "no-py-marker"))
            self.assertFalse(os.path.exists(marker))
            self.assertEqual(c.run(s.node, s.id, "echo allowed", timeout_ms=20000).text, "allowed")
            # A document that does not parse changes nothing.
            with self.assertRaises(fleetmux.BadRequest) as b:
                c.set_policy("version: 1\nrules:\n  - name: x\n    action: explode\n")
            self.assertIn("line", b.exception.message)
            self.assertEqual(c.policy().version, info.version)
        finally:
            gone = c.delete_policy()
        self.assertEqual(gone.version, info.version)
        self.assertEqual(c.policy().version, 0)
        eventually("the node to drop the policy", lambda: self._denied(
            lambda: c.run(s.node, s.id, "echo fm-deny-py", timeout_ms=20000)) is None, timeout=10)

    def test_sandbox_looser_refused(self):
        # The policy chooses a profile; asking for a looser one is refused with
        # code sandbox, and nothing starts.
        c, s = self.c, self.s
        doc = ("version: 1\n"
               "rules:\n"
               "  - name: default\n"
               "    action: allow\n"
               "sandboxes:\n"
               "  profiles:\n"
               "    tight: {network: none}\n"
               "    open: {network: full}\n"
               "  default: tight\n")
        c.set_policy(doc)
        try:
            def refused():
                try:
                    made = c.create_session(node=s.node, argv=["sleep", "60"], sandbox="open")
                except fleetmux.Sandbox as e:
                    return e
                except fleetmux.BadRequest:
                    return None  # no such profile yet: the node has not applied the policy
                c.close_session(made.node, made.id)  # the node had not applied the policy yet
                return None
            e = eventually("the node to apply the sandbox policy", refused, timeout=10)
            self.assertEqual((e.code, e.status), ("sandbox", 403))
            self.assertIsInstance(e, fleetmux.Forbidden)
        finally:
            c.delete_policy()

    def test_policy_holds_for_a_person(self):
        c, s = self.c, self.s
        doc = ("version: 1\n"
               "rules:\n"
               "  - name: py-needs-a-human\n"
               "    match: {command: 'fm-hold-py'}\n"
               "    action: approve\n"
               "    approve_within: 1m\n")
        # The one who asked may not approve: a second admin decides.
        name = "py-approver-%d" % os.getpid()
        approver = Client(token=c.create_token(name, "admin", ttl="1h").secret)
        self.addCleanup(c.revoke_token, name)
        info = c.set_policy(doc)
        try:
            cmd = "echo fm-hold-py; (exit 4)"
            held = eventually("the node to apply the policy", lambda: self._held(
                lambda: c.run(s.node, s.id, cmd, timeout_ms=20000)), timeout=10)
            self.assertEqual((held.code, held.status, held.rule), ("held", 409, "py-needs-a-human"))
            self.assertTrue(held.approval.startswith(s.node + "/a"), held.approval)
            self.assertIn(held.approval, [a.address for a in c.approvals().approvals])
            a = c.approval(held.approval)
            self.assertEqual((a.state, a.kind, a.session, a.command, a.rule, a.policy_version, a.done),
                             ("pending", "run", s.id, cmd, "py-needs-a-human", info.version, False))
            with self.assertRaises(fleetmux.Forbidden):
                c.approve(held.approval)
            node, aid = held.approval.split("/")
            d = approver.approve(node, aid, reason="looks fine")
            self.assertEqual((d.state, d.reason), ("approved", "looks fine"))
            # Approved: the node types it once; its block has the real exit code.
            done = c.approval(held.approval, wait_ms=20000)
            self.assertTrue(done.done)
            self.assertEqual(done.exit_code, 4)
            b = c.block(s.node, s.id, done.block)
            self.assertEqual((b.block.exit_code, b.block.command, b.text), (4, cmd, "fm-hold-py"))
            # Denied: it never runs.
            marker = os.path.join(self.tmp(), "fm-hold-py")
            with self.assertRaises(fleetmux.Held) as h:
                c.run(s.node, s.id, "touch " + marker, timeout_ms=20000)
            self.assertEqual(approver.deny(h.exception.approval, reason="no").state, "denied")
            self.assertTrue(c.approval(h.exception.approval, wait_ms=20000).done)
            self.assertIn(h.exception.approval, [x.address for x in c.approvals(state="denied").approvals])
            self.assertNotIn(h.exception.approval, [x.address for x in c.approvals().approvals])
            with self.assertRaises(fleetmux.Gone):
                approver.approve(h.exception.approval)
            # A fan-out target is held the same way, its result naming the approval.
            f = c.fanout("touch " + marker, sessions=[s.address], timeout_ms=20000)
            err = f.results[0].error
            self.assertEqual((f.failed, err.code, err.rule), (1, "held", "py-needs-a-human"))
            self.assertEqual(c.deny(err.approval).state, "denied")  # the asker may deny
            self.assertFalse(os.path.exists(marker))
        finally:
            c.delete_policy()

    def test_secrets(self):
        # A secret goes to one node and never comes back: only its name is listed.
        c, s = self.c, self.s
        name = "py-secret-%d" % os.getpid()
        info = c.set_secret(s.node, name, "hunter2-py")

        def forget():
            if name in [x.name for x in c.secrets(s.node)]:
                c.delete_secret(s.node, name)
        self.addCleanup(forget)
        self.assertEqual((info.node, info.name), (s.node, name))
        self.assertTrue(info.updated_at)
        listed = [x for x in c.secrets(s.node) if x.name == name]
        self.assertEqual(len(listed), 1)
        self.assertNotIn("hunter2-py", repr(listed))
        with self.assertRaises(fleetmux.BadRequest):
            c.set_secret(s.node, name, "line\nend")
        op = "py-op-secret-%d" % os.getpid()
        operator = Client(token=c.create_token(op, "operator", ttl="1h").secret)
        self.addCleanup(c.revoke_token, op)
        with self.assertRaises(fleetmux.Forbidden):
            operator.secrets(s.node)
        with self.assertRaises(fleetmux.Forbidden):
            operator.set_secret(s.node, name, "x")
        self.assertEqual(c.delete_secret(s.node, name).name, name)
        self.assertNotIn(name, [x.name for x in c.secrets(s.node)])
        with self.assertRaises(fleetmux.NotFound):
            c.delete_secret(s.node, name)

    @staticmethod
    def _held(fn):
        """The Held error fn raises, or None when it returns."""
        try:
            fn()
        except fleetmux.Held as e:
            return e
        return None

    @staticmethod
    def _denied(fn):
        """The Denied error fn raises, or None when it returns."""
        try:
            fn()
        except fleetmux.Denied as e:
            return e
        return None

    def tmp(self):
        """A directory of this test's, removed after it."""
        d = tempfile.mkdtemp(prefix="fleetmux-py-")
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def test_limit(self):
        c, made = self.c, []
        try:
            with self.assertRaises(fleetmux.Limit) as e:
                for _ in range(100):
                    made.append(c.create_session(node=self.s.node, argv=["sleep", "60"]))
            self.assertEqual(e.exception.status, 429)
        finally:
            for x in made:
                c.close_session(x.node, x.id)


class ErrorsTest(unittest.TestCase):
    """Every error code of the API (api/openapi.yaml) has its class, and a reply
    without the API's error body (a proxy's page) gets one by its HTTP status."""

    def test_every_code_has_a_class(self):
        doc = os.path.join(os.path.dirname(__file__), "..", "..", "..", "api", "openapi.yaml")
        with open(doc) as f:
            m = re.search(r"enum: \[(bad_request[^\]]*)\]", f.read())
        codes = [x.strip() for x in m.group(1).split(",")]
        self.assertIn("not_found", codes)
        for code in codes:
            e = fleetmux.errors.error_for(418, code, "m")
            self.assertIsNot(type(e), fleetmux.FleetmuxError, code)
            self.assertEqual((e.code, e.message, e.status), (code, "m", 418))
            self.assertIsInstance(e, fleetmux.FleetmuxError)
        for status, cls in [(410, fleetmux.Gone), (503, fleetmux.Unavailable), (504, fleetmux.Timeout),
                            (500, fleetmux.Internal), (502, fleetmux.Unavailable), (418, fleetmux.BadRequest)]:
            self.assertIsInstance(fleetmux.errors.error_for(status, None, "proxy page"), cls)

    def test_every_operation_has_a_method(self):
        # Each operation of api/openapi.yaml is a Client method: its operationId in
        # snake_case, or renamed here, or left out here with the reason.
        renamed = {"listNodes": "nodes", "listSessions": "sessions", "getSession": "session",
                   "listApprovals": "approvals", "getApproval": "approval", "decideApproval": "decide",
                   "listTokens": "tokens", "getPolicy": "policy", "listSecrets": "secrets",
                   "listAgents": "agents", "getAgent": "agent"}
        left_out = {"attach": "a WebSocket", "live": "a WebSocket for players", "events": "the console's EventSource stream", "metrics": "Prometheus text", "mcpPost": "MCP's own clients",
                    "mcpGet": "MCP's own clients", "mcpDelete": "MCP's own clients"}
        doc = os.path.join(os.path.dirname(__file__), "..", "..", "..", "api", "openapi.yaml")
        with open(doc) as f:
            ops = re.findall(r"operationId: (\w+)", f.read())
        self.assertIn("run", ops)
        for op in ops:
            if op in left_out:
                continue
            name = re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), renamed.get(op, op))
            self.assertTrue(callable(getattr(Client, name, None)), "operation %s: no Client.%s" % (op, name))

    def test_guardrail_fields_of_a_reply(self):
        # A denied or held reply names its rule, a held one its approval: the error
        # carries both (against a fake controller with canned replies).
        import http.server

        replies = {
            "/v1/sessions/n/s/run": (409, {"error": {"code": "held", "message": "held for a person",
                                                     "rule": "prod-needs-a-human", "approval": "n/a7"}}),
            "/v1/sessions/n/t/run": (403, {"error": {"code": "denied", "message": "no", "rule": "no-disk-wipes"}}),
        }

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status, body = replies[self.path]
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        t = threading.Thread(target=srv.serve_forever)
        t.start()
        try:
            c = Client("http://127.0.0.1:%d" % srv.server_address[1], "t")
            with self.assertRaises(fleetmux.Held) as e:
                c.run("n", "s", "deploy")
            self.assertEqual((e.exception.status, e.exception.rule, e.exception.approval),
                             (409, "prod-needs-a-human", "n/a7"))
            with self.assertRaises(fleetmux.Denied) as d:
                c.run("n", "t", "rm -rf /")
            self.assertEqual((d.exception.status, d.exception.rule, d.exception.approval), (403, "no-disk-wipes", ""))
        finally:
            srv.shutdown()
            srv.server_close()
            t.join()


if __name__ == "__main__":
    unittest.main()


class FollowCutTest(unittest.TestCase):
    """follow resumes from the offset reached when a stream is cut abruptly (no final
    chunk), against a fake controller: the first stream breaks after 5 bytes."""

    def test_resumes_after_a_cut(self):
        import http.server
        import json as _json

        data = b"0123456789abcdef"
        asked = []

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                if self.path.startswith("/v1/sessions/n/s/output"):
                    frm = int(re.search(r"from=(\d+)", self.path).group(1))
                    asked.append(frm)
                    self.send_response(200)
                    self.send_header("Content-Type", "application/octet-stream")
                    self.send_header("Fleetmux-Offset", str(frm))
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    part = data[frm:frm + 5] if len(asked) == 1 else data[frm:]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                    self.wfile.flush()
                    if len(asked) == 1:
                        self.close_connection = True
                        return  # cut: no final chunk
                    self.wfile.write(b"0\r\n\r\n")
                    return
                body = _json.dumps({"node": "n", "id": "s", "state": "exited", "output_offset": len(data)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        t = threading.Thread(target=srv.serve_forever)
        t.start()
        try:
            c = Client("http://127.0.0.1:%d" % srv.server_address[1], "t")
            got = b""
            for ch in c.follow("n", "s", from_=0, min_backoff=0.01):
                self.assertEqual(ch.offset, len(got))
                got += ch.data
            self.assertEqual(got, data)
            self.assertEqual(asked, [0, 5])
        finally:
            srv.shutdown()
            srv.server_close()
            t.join()


class TestResolve(unittest.TestCase):
    """The token rule (docs/api.md): a token goes only to an address the user gave
    or that dev.json names with it."""

    def setUp(self):
        self.env = {k: os.environ.get(k) for k in ("XDG_CONFIG_HOME", "FLEETMUX_ADDR", "FLEETMUX_TOKEN")}
        self.dir = tempfile.mkdtemp()
        os.environ["XDG_CONFIG_HOME"] = self.dir
        os.environ.pop("FLEETMUX_ADDR", None)
        os.environ.pop("FLEETMUX_TOKEN", None)

    def tearDown(self):
        for k, v in self.env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(self.dir)

    def write_dev(self, mode=0o600):
        os.makedirs(os.path.join(self.dir, "fleetmux"), mode=0o700, exist_ok=True)
        p = fleetmux.dev_config_path()
        with open(p, "w") as f:
            json.dump({"addr": "http://127.0.0.1:41234", "token": "devtok"}, f)
        os.chmod(p, mode)

    def test_rule(self):
        self.assertEqual(fleetmux.resolve(), (fleetmux.DEFAULT_ADDR, ""))
        with self.assertRaises(fleetmux.FleetmuxError) as cm:
            fleetmux.resolve(None, "mine")
        self.assertIn("FLEETMUX_ADDR", str(cm.exception))
        self.write_dev()
        self.assertEqual(fleetmux.resolve(), ("http://127.0.0.1:41234", "devtok"))
        self.assertEqual(fleetmux.resolve("localhost:41234/"), ("http://127.0.0.1:41234", "devtok"))
        self.assertEqual(fleetmux.resolve("http://[::1]:41234"), ("http://127.0.0.1:41234", "devtok"))
        self.assertEqual(fleetmux.resolve("http://127.0.0.1:41235"), ("http://127.0.0.1:41235", ""))
        self.assertEqual(fleetmux.resolve(None, "mine"), ("http://127.0.0.1:41234", "mine"))
        self.assertEqual(fleetmux.resolve("http://10.0.0.1:7070", "mine"), ("http://10.0.0.1:7070", "mine"))
        os.environ["FLEETMUX_ADDR"] = "http://localhost:41234"
        self.assertEqual(fleetmux.resolve(), ("http://127.0.0.1:41234", "devtok"))

    def test_dev_config_of_others_unused(self):
        self.write_dev(0o644)
        self.assertIsNone(fleetmux.read_dev_config())
        self.assertEqual(fleetmux.resolve(), (fleetmux.DEFAULT_ADDR, ""))


class TestUnreachable(unittest.TestCase):
    def test_friendly_error(self):
        c = Client("http://127.0.0.1:1", "tok")
        with self.assertRaises(fleetmux.Unavailable) as cm:
            c.nodes()
        msg = str(cm.exception)
        self.assertIn("no controller at http://127.0.0.1:1", msg)
        self.assertIn("fleetmux dev", msg)
        self.assertIn("FLEETMUX_ADDR", msg)
