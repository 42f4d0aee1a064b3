"""Many seeded SIGKILLs of a real server across a job's life: every one must change nothing.

    python bench/faults.py [--moments 200] [--seed 1802] [--window-share 0.5] [--span 10]

The SIGKILL suite's job (tests/faults/test_faults_sigkill.py: a ps, a failing checker, a flaky
instance retried on its own, two workers, gang allocation off) runs once without a kill as the
reference, then once per moment on the same `paigraph serve` (Docker simulator, SQLite): the
server is killed at the moment and started again, and the run is compared with the reference
(job and instance ends with their task attempts, the event log, a reconnecting subscriber,
containers started once, commands run as often, nothing left behind).

`--window-share` of the moments are drawn around the flaky instance's first end; each moment is
counted as in the retry window when the kill fell between that end and its retry's start, as
the job's event log dates them. Prints one line per moment and a summary; exits 1 when any
moment made a difference. It needs Docker and takes about 15 s a moment.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.faults.test_faults_sigkill import (  # noqa: E402
    Moment,
    Run,
    Starts,
    differences,
    in_retry_window,
    random_moments,
    reference,
    run_case,
    submitted_life_jobs,
)
from tests.servers import Server, final_job, served  # noqa: E402
from tests.simulated import remove_leftovers  # noqa: E402
from tests.waiting import NotInTime  # noqa: E402

STOP = "mutation($id: ID!) { stopJob(input: {id: $id}) { errors { message } } }"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moments", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1802)
    parser.add_argument("--window-share", type=float, default=0.5)
    parser.add_argument("--span", type=float, default=10.0, help="seconds after submitting")
    parser.add_argument("--keep", type=Path, help="a directory to keep the server's log in")
    args = parser.parse_args()
    moments = random_moments(random.Random(args.seed), args.moments, args.span, args.window_share)
    random.Random(args.seed).shuffle(moments)  # mixed, so a cut-short run still shows both
    with tempfile.TemporaryDirectory(prefix="paigraph-faults-") as scratch:
        where = args.keep or Path(scratch)
        where.mkdir(parents=True, exist_ok=True)
        with served("sqlite", Path(tempfile.mkdtemp(dir=where))) as server:
            print(f"seed {args.seed}; server log {server.log}", flush=True)
            starts = Starts(server.owner)
            try:
                server.start()
                expected = reference(server, starts)
                return _run(server, starts, expected, moments)
            finally:
                starts.close()


def _run(server: Server, starts: Starts, expected: Run, moments: list[Moment]) -> int:
    in_window = differing = differing_in_window = unfinished = 0
    started = time.monotonic()
    for n, moment in enumerate(moments, 1):
        try:
            run = run_case(server, starts, moment)
            problems = differences(expected, run)
            window = in_retry_window(run)
        except Exception as exc:  # the case could not finish (a server slow to start, say)
            unfinished += 1
            print(f"{n:4} unfinished  {moment.name}: {type(exc).__name__}: {exc}", flush=True)
            _recover(server)
            continue
        in_window += window
        differing += bool(problems)
        differing_in_window += bool(problems) and window
        mark = "in window" if window else "         "
        verdict = "; ".join(problems) if problems else "no difference"
        print(f"{n:4} {mark}  {moment.name}: {verdict}", flush=True)
    minutes = (time.monotonic() - started) / 60
    print(
        f"{len(moments) - unfinished} moment(s) run in {minutes:.1f} min: {differing} with a "
        f"difference; {in_window} killed between flaky-0's end and its retry's start "
        f"({differing_in_window} of them with a difference); {unfinished} could not finish",
        flush=True,
    )
    return 1 if differing or unfinished else 0


def _recover(server: Server) -> None:
    """After a case that could not finish: the server answering again, the case's job stopped
    and ended, and nothing of it left, so the next case starts as the others did."""
    server.stop()
    for _ in range(3):
        try:
            server.start()
            break
        except NotInTime:
            server.stop()
    client = server.client()
    for job_id in submitted_life_jobs(client):
        client.execute(STOP, {"id": job_id})
        final_job(client, job_id, timeout=90)
    remove_leftovers(server.owner)


if __name__ == "__main__":
    sys.exit(main())
