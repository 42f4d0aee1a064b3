"""`--dist loadgroup` as scripts/test runs it keeps an xdist_group's tests on one worker, with
the suite's own hook (tests/xdist_groups.py): a run of pytest-xdist on two workers over a few
modules, two of them in one group sharing a module fixture."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.servers import ROOT

CONFTEST = """\
import pytest
from tests.xdist_groups import add_group_suffixes

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    add_group_suffixes(config, items)
"""

GROUPED = """\
import os, time, pytest
pytestmark = pytest.mark.xdist_group("together")

@pytest.mark.parametrize("case", range(4))
def test_grouped(case):
    with open("ran.txt", "a") as ran:
        ran.write(f"{{__name__}} {{case}} {{os.environ['PYTEST_XDIST_WORKER']}}\\n")
    time.sleep(0.2)  # the other worker is free meanwhile: a spread group would reach it
"""

LOOSE = """\
import time

def test_loose_{0}():
    time.sleep(0.1)
"""


def test_a_group_of_two_modules_runs_on_one_worker_beside_the_other_tests(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    for name in ("first", "second"):
        (tmp_path / f"test_{name}.py").write_text(GROUPED.format())
    for index in range(6):
        (tmp_path / f"test_loose_{index}.py").write_text(LOOSE.format(index))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(ROOT)
    two_workers = ["-n", "2", "--dist", "loadgroup"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", *two_workers],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "14 passed" in done.stdout, done.stdout
    ran = [line.split() for line in (tmp_path / "ran.txt").read_text().splitlines()]
    assert sorted((module, case) for module, case, _ in ran) == [
        (module, str(case)) for module in ("test_first", "test_second") for case in range(4)
    ]
    workers = {worker for *_, worker in ran}
    assert len(workers) == 1, f"the group was spread over {sorted(workers)}: {ran}"
    (worker,) = workers
    (other,) = {"gw0", "gw1"} - {worker}
    loose = {line.split()[0] for line in done.stdout.splitlines() if "PASSED test_loose_" in line}
    assert f"[{other}]" in loose, done.stdout  # while the other worker ran the rest
