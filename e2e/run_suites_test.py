#!/usr/bin/env python3
"""Tests of run_suites.py's scheduling, with scripts standing in for the suites' test binaries:
each records its start and end in a log, so the order is read from the log, not from timing.

    python3 e2e/run_suites_test.py      (make scripts-test, in make test)
"""

import argparse
import contextlib
import importlib.util
import io
import tempfile
import threading
import unittest
from pathlib import Path

spec = importlib.util.spec_from_file_location("run_suites", Path(__file__).with_name("run_suites.py"))
run_suites = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_suites)


class Scheduling(unittest.TestCase):
    def setUp(self):
        self.dir = Path(tempfile.mkdtemp(prefix="run-suites-test."))
        self.log = self.dir / "events"
        self.lock = threading.Lock()

    def suite(self, name: str, then: str = "") -> dict:
        """A suite that logs its start and end (and runs `then` in between)."""
        exe = self.dir / name
        exe.write_text(f"#!/bin/sh\necho start {name} >>{self.log}\n{then}\necho end {name} >>{self.log}\n")
        exe.chmod(0o755)
        return {"name": name, "kind": "test", "package_dir": str(self.dir), "executable": str(exe), "label": name}

    def run_lanes(self, prereqs, shared, exclusive) -> list[str]:
        args = argparse.Namespace(threads=1, filter="", skip=[])
        runner = run_suites.Runner(args, {}, prereqs)
        # The runner's reports (each suite's output, each prerequisite's) are not the test's.
        with contextlib.redirect_stdout(io.StringIO()):
            for prereq, _ in prereqs:
                prereq.start()
            done = threading.Thread(target=runner.lanes, args=(shared, exclusive, 2), daemon=True)
            done.start()
            done.join(timeout=60)
        self.assertFalse(done.is_alive(), f"the lanes did not end: {self.events()}")
        self.assertEqual(runner.failed, [])
        return self.events()

    def events(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def assert_alone(self, events: list[str], name: str) -> None:
        start, end = events.index(f"start {name}"), events.index(f"end {name}")
        self.assertEqual(end, start + 1, f"{name} ran beside another suite: {events}")

    def test_exclusive_suites_run_last_when_nothing_waits(self):
        image = run_suites.Prereq("the image", None, self.lock)
        events = self.run_lanes([(image, ["X", "Y"])], [self.suite("A"), self.suite("B")],
                                [self.suite("X"), self.suite("Y")])
        self.assertEqual(sorted(events[:4]), ["end A", "end B", "start A", "start B"])
        self.assertEqual(events[4:], ["start X", "end X", "start Y", "end Y"])

    def test_an_exclusive_suite_fills_the_wait_for_a_prerequisite(self):
        # The tools are ready only once X has run: without X running during the wait, the lanes
        # never end.
        image = run_suites.Prereq("the image", None, self.lock)
        tools = run_suites.Prereq("the tools", f"until grep -q 'end X' {self.log}; do sleep 0.1; done",
                                  self.lock)
        events = self.run_lanes([(image, ["X", "Y"]), (tools, ["A", "Y"])],
                                [self.suite("A"), self.suite("B")], [self.suite("X"), self.suite("Y")])
        self.assertLess(events.index("end B"), events.index("start X"), events)
        self.assert_alone(events, "X")
        self.assert_alone(events, "Y")
        self.assertLess(events.index("end X"), events.index("start A"), events)

    def test_a_shared_suite_does_not_start_while_an_exclusive_one_runs(self):
        # X runs while A waits for the tools; the tools are ready while X still runs (X waits for
        # them): A starts only after X's end.
        image = run_suites.Prereq("the image", None, self.lock)
        marker = self.dir / "tools-ready"
        tools = run_suites.Prereq("the tools", f"until grep -q 'start X' {self.log}; do sleep 0.1; done; "
                                  f"touch {marker}", self.lock)
        x = self.suite("X", then=f"until [ -e {marker} ]; do sleep 0.1; done")
        events = self.run_lanes([(image, ["X"]), (tools, ["A"])], [self.suite("A")], [x])
        self.assertEqual(events, ["start X", "end X", "start A", "end A"])


if __name__ == "__main__":
    unittest.main()
