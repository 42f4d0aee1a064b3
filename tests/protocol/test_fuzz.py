"""Hostile configs at volume: mutated real configs never crash or hang validation or a server.

A fixed seed and a bounded budget keep this in CI (bench/fuzz.py runs the full 10,000 and
prints the figures). Every crash or hang the fuzzer found is a regression case below.
"""

from __future__ import annotations

import faulthandler
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from server.protocol.engine import parse_document
from server.protocol.fields import MAX_UNKNOWN_REPORTED
from server.protocol.loader import MAX_VALUES
from tests.fuzzing import TIME_BOUND, Mutator, check, hammer, percentile
from tests.servers import ROOT, Server, served

SEED = 20261124
BUDGET_DOCUMENTS = 1500
BUDGET_SECONDS = 60.0
HANG_WATCHDOG = 120  # a document stuck this long ends the run with every thread's stack


def test_mutated_configs_never_crash_or_hang_validation() -> None:
    mutator = Mutator(SEED)
    problems, checked, slowest = [], 0, 0.0
    deadline = time.monotonic() + BUDGET_SECONDS
    faulthandler.dump_traceback_later(HANG_WATCHDOG, exit=True)
    try:
        while checked < BUDGET_DOCUMENTS and time.monotonic() < deadline:
            result = check(mutator.one())
            checked += 1
            slowest = max(slowest, result.seconds)
            if result.problem:
                problems.append(f"{result.label}: {result.problem}")
    finally:
        faulthandler.cancel_dump_traceback_later()
    assert checked >= 200, f"only {checked} documents in the budget"
    assert problems == [], f"{len(problems)} of {checked}:\n" + "\n".join(problems[:20])


# --- regressions the fuzzer found --------------------------------------------------------------


def _timed(document: bytes | str) -> tuple[float, list]:
    started = time.perf_counter()
    result = parse_document(document)
    return time.perf_counter() - started, result.errors


def test_a_yaml_list_of_a_quarter_million_items_is_refused_fast() -> None:
    text = "protocolVersion: 2\nprerequisites:\n" + "- x\n" * 225_000  # 900 KB
    seconds, errors = _timed(text)
    assert [e.code for e in errors] == ["too-many-values"]
    assert str(MAX_VALUES) in errors[0].message
    assert seconds < TIME_BOUND


def test_a_json_document_of_too_many_values_is_refused_by_the_same_rule() -> None:
    doc = {"protocolVersion": 2, "name": "x", "type": "job", "parameters": list(range(60_000))}
    seconds, errors = _timed(json.dumps(doc))
    assert [e.code for e in errors] == ["too-many-values"]
    assert seconds < TIME_BOUND


def test_a_config_just_under_the_value_limit_is_still_read() -> None:
    doc = yaml.safe_load(Path(ROOT / "examples" / "dialects" / "counting.v2.yaml").read_text())
    doc["parameters"] = {"table": list(range(MAX_VALUES - 200))}
    for text in (yaml.safe_dump(doc), json.dumps(doc)):
        seconds, errors = _timed(text)
        assert errors == []
        assert seconds < TIME_BOUND


def test_forty_five_thousand_stray_keys_give_a_counted_error_fast() -> None:
    doc = yaml.safe_load(Path(ROOT / "examples" / "dialects" / "counting.v2.yaml").read_text())
    doc["taskRoles"]["counter"]["resourcePerInstance"] |= {f"k{i}": i for i in range(20_000)}
    seconds, errors = _timed(json.dumps(doc))
    stray = [e for e in errors if e.code == "unknown-field"]
    assert len(stray) == MAX_UNKNOWN_REPORTED + 1
    assert stray[-1].path == "taskRoles.counter.resourcePerInstance"
    assert f"and {20_000 - MAX_UNKNOWN_REPORTED} more unknown fields" in stray[-1].message
    assert seconds < TIME_BOUND


# --- the command line and a real server --------------------------------------------------------


def test_paigraph_validate_answers_every_mutant_of_a_sample(tmp_path: Path) -> None:
    mutants = Mutator(SEED + 1).take(60)
    files = []
    for number, mutant in enumerate(mutants):
        path = tmp_path / f"m{number:03}.yaml"
        path.write_bytes(mutant.data)
        files.append(path)
    done = subprocess.run(
        [sys.executable, "-m", "server.cli", "validate", "--json", *map(str, files)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    reports = {Path(r["file"]).name: r for r in json.loads(done.stdout)}
    assert set(reports) == {f.name for f in files}
    for name, report in reports.items():
        assert report["valid"] or report["errors"], name
        for error in report["errors"]:
            assert isinstance(error["path"], str) and error["code"] and error["message"], error
    plain = subprocess.run(
        [sys.executable, "-m", "server.cli", "validate", *map(str, files[:20])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert plain.returncode in (0, 1) and "Traceback" not in plain.stderr, plain.stderr[-2000:]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with served("sqlite", tmp_path) as running:
        running.start()
        yield running


@pytest.mark.docker
def test_a_server_under_hostile_submissions_answers_each_and_stays_responsive(
    server: Server,
) -> None:
    report = hammer(server.url, Mutator(SEED + 2).take(300), threads=2)
    assert report.problems == [], "\n".join(report.problems[:20])
    assert report.sent == 300
    assert report.refused > 0 and report.accepted > 0, report
    # liveness only (bench/fuzz.py measures): nothing stalls, a plain query keeps answering
    assert max(report.submit_seconds) < 10 * TIME_BOUND, max(report.submit_seconds)
    assert len(report.probe_seconds) >= 10
    assert percentile(report.probe_seconds, 0.5) < 1.0, sorted(report.probe_seconds)[-10:]
    log = server.output()
    assert "Traceback" not in Path(server.log).read_text(errors="replace"), log
