"""The real OpenPAI configs of ../shared/corpus run on the simulator's defaults as written.

Each valid job is taken as `resolveJob` takes it: resolved and rendered, its first attempt
built (`not-runnable` if it cannot be), then asked of the Docker backend whether it can ever
run (`refusal`), on a simulator with the built-in default settings. Every refusal is printed
with its reason.

Thresholds:
- refusals other than file-system ones: at most 5% of the valid jobs, always;
- file-system refusals (hdfs:// and $PAI_DEFAULT_FS_URI paths, v1 codeDir / dataDir /
  outputDir on the cluster's default file system, /mnt paths) are counted apart while this
  simulator has no simulated HDFS; once it serves hdfs:// (probed below), they count too, and
  all refusals together must stay at or under 5%.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from backends.docker import DockerBackend
from server.jobs.launch import launch_request
from server.jobs.not_runnable import NotRunnable
from server.protocol.engine import resolve_job
from simulator.settings import STATE_ENV, load_settings
from tests.corpus import STRICTER, Entry, top_level
from tests.simulated import IMAGE, remove_leftovers

pytestmark = [pytest.mark.shared("corpus"), pytest.mark.docker]

MOST_REFUSED = 0.05
FTP_EXAMPLE = "pai__src__rest-server__test__v2__protocol.js__valid__pytorch_mnist.yaml"
_FILE_SYSTEM = re.compile(r"hdfs|HDFS_URI|PAI_DEFAULT_FS_URI|/mnt/", re.IGNORECASE)
_V1_DIRECTORY = re.compile(r"prerequisite '(code|data|output)': /")


@dataclass(frozen=True)
class Refusal:
    file: str
    code: str  # refused (the backend's refusal) or not-runnable (the attempt cannot be built)
    reason: str
    file_system: bool


@pytest.fixture
def simulator(tmp_path: Path) -> Iterator[DockerBackend]:
    settings = load_settings(environ={STATE_ENV: str(tmp_path)})  # the defaults otherwise
    sim = DockerBackend(settings, owner=f"test-{uuid.uuid4().hex[:8]}")
    try:
        yield sim
    finally:
        remove_leftovers(sim.owner)


def refusal_of(sim: DockerBackend, text: str) -> tuple[str, str] | None:
    """(code, reason) when the job cannot run here as resolveJob would say, else None."""
    result = resolve_job(text)
    assert result.spec is not None, [str(e) for e in result.errors]
    try:
        request = launch_request(result.spec, job_id="dry-run", user="default")
    except NotRunnable as exc:
        return "not-runnable", f"{exc.path}: {exc.message}"
    reason = sim.refusal(request)
    return ("refused", reason) if reason else None


def is_file_system(entry: Entry, reason: str) -> bool:
    if _FILE_SYSTEM.search(reason):
        return True
    # v1's codeDir / dataDir / outputDir name paths on the cluster's default file system
    return entry.kind.startswith("v1") and bool(_V1_DIRECTORY.match(reason))


def serves_hdfs(sim: DockerBackend) -> bool:
    """Whether this simulator runs a job reading hdfs:// data (a simulated HDFS)."""
    probe = {
        "protocolVersion": 2,
        "name": "probe",
        "type": "job",
        "prerequisites": [
            {"name": "img", "type": "dockerimage", "uri": IMAGE},
            {"name": "d", "type": "data", "uri": ["hdfs://namenode:9000/probe"]},
        ],
        "taskRoles": {
            "main": {
                "dockerImage": "img",
                "data": "d",
                "resourcePerInstance": {"cpu": 1, "memoryMB": 128, "gpu": 0},
                "commands": ["true"],
            }
        },
    }
    return refusal_of(sim, json.dumps(probe)) is None


def test_at_most_five_percent_of_the_corpus_is_refused_on_the_defaults(
    simulator: DockerBackend, capsys: pytest.CaptureFixture[str]
) -> None:
    valid = [e for e in top_level(valid=True) if e.file not in STRICTER]
    refusals = []
    for entry in valid:
        found = refusal_of(simulator, entry.path.read_bytes().decode("utf-8"))
        if found is not None:
            code, reason = found
            refusals.append(Refusal(entry.file, code, reason, is_file_system(entry, reason)))
    file_system = [r for r in refusals if r.file_system]
    other = [r for r in refusals if not r.file_system]
    hdfs = serves_hdfs(simulator)
    counted = refusals if hdfs else other
    lines = [
        f"{len(refusals)} of {len(valid)} valid corpus jobs refused on the default settings: "
        f"{len(other)} other, {len(file_system)} file-system "
        f"({'counted: hdfs:// is simulated' if hdfs else 'counted apart: no simulated HDFS'})",
        *(
            f"  [{'file-system' if r.file_system else 'other'}] {r.file} ({r.code}): {r.reason}"
            for r in refusals
        ),
    ]
    report = "\n".join(lines)
    with capsys.disabled():
        print("\n" + report)
    assert valid, "no valid jobs in the corpus"
    assert len(counted) <= MOST_REFUSED * len(valid), report


def test_the_rest_servers_ftp_script_example_is_accepted(simulator: DockerBackend) -> None:
    """Its script is `ftp://pytorch_examples`, which the simulator fetches as a cluster would."""
    (entry,) = [e for e in top_level(valid=True) if e.file == FTP_EXAMPLE]
    assert refusal_of(simulator, entry.path.read_bytes().decode("utf-8")) is None
