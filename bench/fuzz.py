"""Hostile configs at volume: 10,000 mutated configs through validate, a few hundred through a
real server, and how fast a plain query is answered meanwhile.

    python bench/fuzz.py [--documents 10000] [--submissions 300] [--seed 20261124]

Mutates the configs of ../shared/corpus and examples/ (tests/fuzzing.py: types swapped, fields
deleted and duplicated, huge and deep values, anchors and aliases, billion laughs, YAML tags,
invalid UTF-8, 10,000 roles, bytes flipped) and:

  validate   parse_document on every document in this process (what `paigraph validate` runs);
             per mutation: how many, how many valid, the slowest and the 99th percentile
  serve      a real `paigraph serve` on the Docker simulator and a fresh SQLite database; two
             clients send `--submissions` mutated configs through submitJob (an accepted job
             is stopped at once) while a third asks `jobs(first: 10)` every 50 ms

Goals: no crash, no refusal without an error, no document over 2 s; the probe query's p50
under 100 ms during the load. Prints figures and what went wrong; exits 0.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fuzzing import TIME_BOUND, Mutator, check, hammer, percentile  # noqa: E402

PROBE_GOAL = 0.100


def validate(documents: int, seed: int) -> None:
    mutator = Mutator(seed)
    seconds: dict[str, list[float]] = collections.defaultdict(list)
    valid: collections.Counter[str] = collections.Counter()
    problems: list[str] = []
    started = time.perf_counter()
    for _ in range(documents):
        result = check(mutator.one())
        kind = result.label.split(" of ", 1)[0]
        seconds[kind].append(result.seconds)
        valid[kind] += result.valid
        if result.problem:
            problems.append(f"{result.label}: {result.problem}")
    wall = time.perf_counter() - started
    print(f"validate: {documents} documents from {len(mutator.seeds)} seeds, seed {seed}")
    print(f"  {'mutation':<16}{'count':>7}{'valid':>7}{'p99 ms':>10}{'max ms':>10}")
    for kind in sorted(seconds):
        times = seconds[kind]
        print(
            f"  {kind:<16}{len(times):>7}{valid[kind]:>7}"
            f"{percentile(times, 0.99) * 1000:>10.1f}{max(times) * 1000:>10.1f}"
        )
    every = [s for times in seconds.values() for s in times]
    print(
        f"  all: {sum(every):.1f} s validating ({wall:.1f} s with mutating), "
        f"slowest {max(every):.3f} s (bound {TIME_BOUND} s), problems {len(problems)}"
    )
    for problem in problems[:20]:
        print(f"  PROBLEM {problem}")


def serve(submissions: int, seed: int) -> None:
    from tests.e2e.test_e2e_server import served

    with tempfile.TemporaryDirectory() as tmp, served("sqlite", Path(tmp)) as server:
        server.start()
        mutants = Mutator(seed + 2).take(submissions)
        started = time.perf_counter()
        report = hammer(server.url, mutants, threads=2)
        wall = time.perf_counter() - started
        traceback = "Traceback" in Path(server.log).read_text(errors="replace")
    probe = report.probe_seconds
    print(f"serve: {report.sent} submissions in {wall:.1f} s from 2 clients")
    print(
        f"  accepted {report.accepted} (stopped at once), refused with errors {report.refused}, "
        f"refused before GraphQL (400/413) {report.unreadable}, problems {len(report.problems)}"
    )
    print(
        f"  submitJob: p50 {percentile(report.submit_seconds, 0.5) * 1000:.0f} ms, "
        f"p99 {percentile(report.submit_seconds, 0.99) * 1000:.0f} ms, "
        f"max {max(report.submit_seconds) * 1000:.0f} ms"
    )
    print(
        f"  probe jobs(first: 10) x{len(probe)}: p50 {percentile(probe, 0.5) * 1000:.1f} ms, "
        f"p95 {percentile(probe, 0.95) * 1000:.1f} ms, max {max(probe) * 1000:.1f} ms "
        f"(goal p50 < {PROBE_GOAL * 1000:.0f} ms: "
        f"{'met' if percentile(probe, 0.5) < PROBE_GOAL else 'NOT met'})"
    )
    print(f"  traceback in the server log: {'YES' if traceback else 'no'}")
    for problem in report.problems[:20]:
        print(f"  PROBLEM {problem}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=10_000)
    parser.add_argument("--submissions", type=int, default=300)
    parser.add_argument("--seed", type=int, default=20261124)
    args = parser.parse_args()
    validate(args.documents, args.seed)
    if args.submissions:
        serve(args.submissions, args.seed)


if __name__ == "__main__":
    main()
