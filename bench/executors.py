"""The fast executor against graphql-core's standard one: the same answers, and the time each takes.

    python bench/executors.py [--queries 3000] [--seed 18]

The long run of tests/api/test_api_differential.py (which CI runs with a few hundred queries):
one populated SQLite store (users, jobs waiting, running and finished with their event logs,
marketplace items) served by two apps in this process, one per executor (PAIGRAPH_EXECUTOR),
and `--queries` random valid queries from schema.graphql (tests/query_generator.py) sent to
both over in-process HTTP, alternating which goes first. Every answer must be the same:
status, data, errors with messages, paths and codes.

Then the executors' hot path, the page the job list asks for: `--page-requests` times each,
interleaved, the admin's newest 50 running jobs with their roles, instances and ports (the
store has 50 more running jobs for it).

Prints the queries compared, how many had errors, fragments and directives, the mismatches
(the first few in full), each executor's total and p50 time per query, and the page's p50 per
executor, each with the ratio fast / standard. Exits 1 when an answer differs, else 0.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from graphql import build_schema  # noqa: E402

from tests.differential_support import SCHEMA_FILE, ask, two_executors  # noqa: E402
from tests.query_generator import GeneratedQuery, QueryGenerator  # noqa: E402

SHOWN_MISMATCHES = 5
PAGE_JOBS = 50
PAGE = GeneratedQuery(
    "query Page($first: Int) { jobs(first: $first) { edges { node { id name state "
    "taskRoles { name instances { index state hostIp ports { label ports } } } } } } }",
    {"first": PAGE_JOBS},
)


async def compare(queries: int, seed: int, page_requests: int) -> int:
    with tempfile.TemporaryDirectory(prefix="paigraph-executors-") as folder:
        async with two_executors(Path(folder), more_running=PAGE_JOBS) as world:
            generator = QueryGenerator(build_schema(SCHEMA_FILE.read_text()), world.values)
            rng = random.Random(seed)
            spent: dict[str, list[float]] = {"fast": [], "standard": []}
            clients = {"fast": world.fast, "standard": world.standard}
            mismatches = []
            seen = {"with errors": 0, "with fragments": 0, "with directives": 0}
            for n in range(queries):
                query = generator.query(rng)
                token = world.admin_token if n % 4 == 0 else world.token
                order = ("fast", "standard") if n % 2 else ("standard", "fast")
                answers = {}
                for name in order:
                    started = time.perf_counter()
                    answers[name] = await ask(clients[name], query, token)
                    spent[name].append(time.perf_counter() - started)
                if answers["fast"] != answers["standard"]:
                    mismatches.append((query, answers))
                seen["with errors"] += bool(answers["standard"]["errors"])
                seen["with fragments"] += "fragment " in query.text
                seen["with directives"] += bool(query.variables)
            page: dict[str, list[float]] = {"fast": [], "standard": []}
            for n in range(page_requests):
                order = ("fast", "standard") if n % 2 else ("standard", "fast")
                for name in order:
                    started = time.perf_counter()
                    answer = await ask(clients[name], PAGE, world.admin_token)
                    page[name].append(time.perf_counter() - started)
                    assert not answer["errors"] and len(answer["data"]["jobs"]["edges"]) == 50
    print(f"{queries} random queries (seed {seed}), {generator.rejected} drafts drawn again")
    print(", ".join(f"{count} {what}" for what, count in seen.items()))
    for name, times in spent.items():
        total, p50 = sum(times), statistics.median(times) * 1000
        print(f"  {name:8} total {total:7.2f} s   p50 {p50:6.2f} ms per query")
    ratio = sum(spent["fast"]) / sum(spent["standard"])
    print(f"  fast / standard: {ratio:.2f}")
    p50 = {name: statistics.median(times) * 1000 for name, times in page.items()}
    print(f"the page of {PAGE_JOBS} jobs with roles, instances and ports, {page_requests} times:")
    for name, value in p50.items():
        print(f"  {name:8} p50 {value:6.2f} ms")
    print(f"  fast / standard: {p50['fast'] / p50['standard']:.2f}")
    print(f"{len(mismatches)} answers differ")
    for query, answers in mismatches[:SHOWN_MISMATCHES]:
        print(f"\n{query.text}\nvariables: {query.variables}")
        for name, answer in answers.items():
            print(f"  {name}: {answer}")
    return 1 if mismatches else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--page-requests", type=int, default=200)
    arguments = parser.parse_args()
    sys.exit(asyncio.run(compare(arguments.queries, arguments.seed, arguments.page_requests)))


if __name__ == "__main__":
    main()
