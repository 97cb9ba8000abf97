#!/usr/bin/env python3
"""Runs the workspace's test binaries' ignored (e2e) tests, several binaries at a time.

`cargo test` runs its test binaries one after another, and the e2e suites spend most of their
time waiting on the cluster (pods starting, rollouts, scrapes), so on two cores a second lane
nearly halves the e2e stage. The suites share LANES lanes, the longest first (durations of
earlier runs are kept in the target dir, over e2e/suite-durations.json); then the suites that
install the whole project (cluster-wide webhooks, ClusterRoles, fixed namespaces: --exclusive)
run, each alone. An exclusive suite runs earlier only in time the lanes would leave idle: when
no suite runs and every shared suite left waits for a prerequisite (below).

With --image-cmd, the project's image is built and imported by that command in the background,
at the lowest CPU priority, while the suites that do not run it go ahead: it fills the cores
those leave idle. The suites that run the image (--image-suite, and every exclusive one) start
once it is in the nodes; a suite started before that gets E2E_PROJECT_IMAGE_PENDING=1, and the
harness fails it if it asks for the image (e2e::real), naming the list to add it to.
--prereq NAME=CMD and --prereq-suite NAME=SUITE are the same for any other build some suites
need (Thanos's binary and image, cert-manager's, the previous release's, each built from source
on a cold machine): CMD runs in the background from the start, and SUITE starts once it is done.

Every binary's output is printed whole when it ends, with cargo's `Running` line before it, so
logs read as cargo's and `test result:` lines can be summed. Exit status 1 when any binary failed
(all of them are run), 2 when the build failed.

    run_suites.py [--lanes N] [--threads N] [--filter SUBSTRING] [--skip SUBSTRING]...
                  [--exclusive SUITE]... [--image-cmd CMD [--image-suite SUITE]...]
                  [--prereq NAME=CMD]... [--prereq-suite NAME=SUITE]...
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def build(cargo: str) -> list[dict]:
    """The test executables of `cargo test --workspace --tests`, built, in cargo's order."""
    proc = subprocess.Popen(
        [cargo, "test", "--workspace", "--tests", "--no-run", "--message-format=json-render-diagnostics"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    found = []
    for line in proc.stdout:
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg.get("profile", {}).get("test"):
            continue
        target = msg["target"]
        package = Path(msg["manifest_path"]).parent
        kind = target["kind"][0]
        src = Path(target["src_path"])
        label = f"{'unittests' if kind != 'test' else 'tests'} {src.relative_to(package)} ({package.name})"
        found.append({
            "name": target["name"],
            "kind": kind,
            "package_dir": str(package),
            "executable": msg["executable"],
            "label": label,
        })
    if proc.wait() != 0:
        sys.exit(2)
    return found


def lowest_priority() -> None:
    """In a child of its own session: the lowest CPU priority. With the kernel's autogroup
    scheduling a session is one scheduling group, weighed against the others whatever its
    processes' nice values, so the group's niceness is set as well."""
    os.nice(19)
    try:
        with open("/proc/self/autogroup", "w") as group:
            group.write("19")
    except OSError:
        pass  # no autogroup scheduling: nice alone counts


class Prereq:
    """What some suites need in the nodes (the project's image, Thanos), made by a command in the
    background (or ready)."""

    def __init__(self, what: str, cmd: str | None, lock: threading.Lock):
        self.what = what
        self.cmd = cmd
        self.lock = lock  # the runner's: one report at a time on stdout
        self.done = threading.Event()
        self.ok = cmd is None
        self.child: subprocess.Popen | None = None
        if cmd is None:
            self.done.set()

    def start(self) -> None:
        if self.cmd is None:
            return
        self.t0 = time.monotonic()
        self.log = tempfile.TemporaryFile(mode="w+")
        self.child = subprocess.Popen(["bash", "-c", self.cmd], stdout=self.log, stderr=subprocess.STDOUT,
                                      start_new_session=True, preexec_fn=lowest_priority)
        threading.Thread(target=self.wait, daemon=True).start()

    def wait(self) -> None:
        assert self.child is not None
        rc = self.child.wait()
        self.log.seek(0)
        output = self.log.read()
        self.ok = rc == 0
        took = time.monotonic() - self.t0
        with self.lock:
            print(f"== {self.what} ({self.cmd}): {'ok' if self.ok else f'FAILED (exit {rc})'} "
                  f"in {took:.1f} s", flush=True)
            sys.stdout.write(output)
            sys.stdout.flush()
        self.done.set()


class Runner:
    def __init__(self, args, durations: dict, prereqs: list[tuple[Prereq, list[str]]]):
        self.args = args
        self.durations = durations
        # Each prerequisite with the suites that wait for it; the project's image comes first.
        self.prereqs = prereqs
        image = prereqs[0][0]
        self.image = image
        self.failed: list[str] = []
        self.lock = image.lock
        self.children: set[subprocess.Popen] = set()

    def key(self, t: dict) -> str:
        # The package's directory name, not its path: a clone elsewhere shares the durations.
        return f"{Path(t['package_dir']).name}:{t['kind']}:{t['name']}"

    def run(self, t: dict) -> None:
        cmd = [t["executable"], "--ignored", f"--test-threads={self.args.threads}"]
        if self.args.filter:
            cmd.append(self.args.filter)
        for s in self.args.skip:
            cmd += ["--skip", s]
        env = dict(os.environ, CARGO_MANIFEST_DIR=t["package_dir"])
        if not self.image.done.is_set():
            env["E2E_PROJECT_IMAGE_PENDING"] = "1"
        t0 = time.monotonic()
        with tempfile.TemporaryFile(mode="w+") as log:
            child = subprocess.Popen(cmd, cwd=t["package_dir"], env=env, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
            with self.lock:
                self.children.add(child)
            rc = child.wait()
            took = time.monotonic() - t0
            log.seek(0)
            out = log.read()
        with self.lock:
            self.children.discard(child)
            self.durations[self.key(t)] = took
            print(f"     Running {t['label']} ({t['executable']})", flush=True)
            sys.stdout.write(out)
            print(f"== {t['label']}: {'ok' if rc == 0 else f'FAILED (exit {rc})'} in {took:.1f} s", flush=True)
            if rc != 0:
                self.failed.append(t["label"])

    def needs(self, t: dict) -> list[Prereq]:
        """What t waits for: the project's image, another build (--prereq), or nothing. A suite is
        named by its test target, a crate's own unit tests by the crate's library (e.g. `e2e`)."""
        if t["kind"] not in ("test", "lib"):
            return []
        return [prereq for prereq, suites in self.prereqs if t["name"] in suites]

    def run_ready(self, t: dict) -> None:
        """Runs t, whose prerequisites are ready; a suite whose prerequisite failed is failed,
        not run."""
        failed = [prereq.what for prereq in self.needs(t) if not prereq.ok]
        if failed:
            with self.lock:
                print(f"== {t['label']}: FAILED (not run: {', '.join(failed)} failed)", flush=True)
                self.failed.append(t["label"])
        else:
            self.run(t)

    def lanes(self, shared: list[dict], exclusive: list[dict], n: int) -> None:
        """Runs the shared suites in n lanes, in order, each once what it needs is ready, and the
        exclusive ones each alone, in order. An exclusive suite goes first only into time the
        lanes would spend idle: when nothing runs and no shared suite is ready (a cold machine's
        lanes wait for the test tools or Thanos); otherwise the exclusive ones run last, as a
        warm machine runs them."""
        queue = list(shared)
        alone = list(exclusive)
        cond = threading.Condition()
        running = {"suites": 0, "exclusive": False}

        def ready(t: dict) -> bool:
            return all(prereq.done.is_set() for prereq in self.needs(t))

        def take() -> dict | None:
            """The next suite to run (counted as running), None when none is left; waits while
            none can start. Called holding cond."""
            while queue or alone:
                if not running["exclusive"]:
                    t = next((t for t in queue if ready(t)), None)
                    if t is not None:
                        queue.remove(t)
                        running["suites"] += 1
                        return t
                    if running["suites"] == 0:
                        t = next((t for t in alone if ready(t)), None)
                        if t is not None:
                            alone.remove(t)
                            running["suites"] += 1
                            running["exclusive"] = True
                            return t
                # Nothing can start: a suite's end or a prerequisite's (looked at every second,
                # as prerequisites do not notify) may change that.
                cond.wait(timeout=1)
            return None

        def lane():
            while True:
                with cond:
                    t = take()
                if t is None:
                    return
                try:
                    self.run_ready(t)
                finally:
                    with cond:
                        running["suites"] -= 1
                        if t in exclusive:
                            running["exclusive"] = False
                        cond.notify_all()

        threads = [threading.Thread(target=lane) for _ in range(max(1, n))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()

    def stop(self, *_):
        with self.lock:
            for child in self.children:
                try:
                    os.killpg(child.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            for prereq, _ in self.prereqs:
                if prereq.child is not None and prereq.child.poll() is None:
                    try:
                        os.killpg(prereq.child.pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
        sys.exit(130)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lanes", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--filter", default="")
    p.add_argument("--skip", action="append", default=[])
    p.add_argument("--exclusive", action="append", default=[])
    p.add_argument("--image-cmd", default=None)
    p.add_argument("--image-suite", action="append", default=[])
    p.add_argument("--prereq", action="append", default=[], help="NAME=CMD")
    p.add_argument("--prereq-suite", action="append", default=[], help="NAME=SUITE")
    args = p.parse_args()
    # The suites that install the whole project run its image.
    args.image_suite = args.image_suite + args.exclusive

    cargo = os.environ.get("CARGO", "cargo")
    target_dir = Path(os.environ.get("CARGO_TARGET_DIR", "target"))
    durations_file = target_dir / "e2e-suite-durations.json"
    # Durations of earlier runs on this machine, over the ones shipped with the suites (so a
    # first run, with an empty target dir, also starts the longest suites first).
    durations = {}
    for known in (Path(__file__).parent / "suite-durations.json", durations_file):
        try:
            durations.update(json.loads(known.read_text()))
        except (OSError, ValueError):
            pass

    tests = build(cargo)
    lock = threading.Lock()
    prereqs = [(Prereq("the project's image", args.image_cmd, lock), args.image_suite)]
    for spec in args.prereq:
        name, _, cmd = spec.partition("=")
        suites = [s.partition("=")[2] for s in args.prereq_suite if s.partition("=")[0] == name]
        prereqs.append((Prereq(name, cmd, lock), suites))
    runner = Runner(args, durations, prereqs)
    signal.signal(signal.SIGTERM, runner.stop)
    signal.signal(signal.SIGINT, runner.stop)

    exclusive = [t for t in tests if t["kind"] == "test" and t["name"] in args.exclusive]
    shared = [t for t in tests if t not in exclusive]
    # Longest first (unknown ones count as long): the lanes end close together.
    shared.sort(key=lambda t: -durations.get(runner.key(t), float("inf")))

    t0 = time.monotonic()
    for prereq, _ in prereqs:
        prereq.start()
    runner.lanes(shared, exclusive, args.lanes)
    # Nothing left behind: a prerequisite no selected suite needed is still waited for.
    for prereq, _ in prereqs:
        prereq.done.wait()
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
        durations_file.write_text(json.dumps(runner.durations, indent=1, sort_keys=True))
    except OSError as e:
        print(f"run_suites: durations not kept: {e}", file=sys.stderr)
    took = time.monotonic() - t0
    if runner.failed:
        print(f"run_suites: {len(runner.failed)} of {len(tests)} test binaries failed in {took:.0f} s: "
              + ", ".join(runner.failed), file=sys.stderr)
        return 1
    print(f"run_suites: {len(tests)} test binaries passed in {took:.0f} s ({args.lanes} lanes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
