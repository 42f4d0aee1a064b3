"""Exit-code classification: our table agrees with OpenPAI's exit spec, and what the user sees."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from server.jobs import exit_codes
from server.jobs.exit_codes import Behaviour, Reaction, classify, spec_for, table
from tests.corpus import SHARED

REFERENCE = SHARED / "reference" / "k8s-job-exit-spec.yaml"


def reference_entries() -> list[dict]:
    return yaml.safe_load(REFERENCE.read_text())["spec"]


@pytest.mark.shared("reference")
def test_every_code_of_openpai_exit_spec_has_the_same_name_and_retry_behaviour_here() -> None:
    entries = reference_entries()
    assert len(entries) > 50
    ours = table()
    for entry in entries:
        code = entry["code"]
        assert code in ours, f"code {code} ({entry['phrase']}) is missing"
        spec = ours[code]
        assert spec.phrase == entry["phrase"], code
        assert spec.behaviour == Behaviour(entry["behavior"]), code
        assert spec.reaction == Reaction(entry["reaction"]), code
    # every code but paigraph's own comes from the spec, and those are not in the spec
    assert set(ours) - exit_codes.OWN_CODES == {e["code"] for e in entries}
    assert not exit_codes.OWN_CODES & {e["code"] for e in entries}


@pytest.mark.shared("reference")
def test_the_explanations_are_our_own_and_every_failure_says_what_to_do() -> None:
    reference = {e["code"]: e.get("reason") for e in reference_entries()}
    for code, spec in table().items():
        assert spec.description and spec.description != reference.get(code), code
        if code not in (0, *exit_codes.STOP_CODES):
            assert spec.solution, f"code {code} gives no advice"


def test_the_package_has_its_own_table_and_reads_no_reference_file() -> None:
    package = Path(exit_codes.__file__).parent
    for source in package.glob("*.py"):
        text = source.read_text()
        assert "k8s-job-exit-spec" not in text and "/shared/" not in text, source.name


def test_success() -> None:
    ended = classify(0)
    assert ended.succeeded and ended.code == 0 and ended.phrase == "Succeeded"
    assert ended.reason == "exit code 0: the command finished successfully"


@pytest.mark.parametrize(
    ("code", "behaviour", "signal"),
    [
        (130, Behaviour.TRANSIENT, "SIGINT"),
        (137, Behaviour.TRANSIENT, "SIGKILL"),
        (143, Behaviour.TRANSIENT, "SIGTERM"),
        (132, Behaviour.PERMANENT, "SIGILL"),
        (139, Behaviour.UNKNOWN, "SIGSEGV"),
    ],
)
def test_signals_keep_their_code_and_name_the_signal(code, behaviour, signal) -> None:
    ended = classify(code, log_tail="Segmentation fault (core dumped)")
    assert (ended.code, ended.exit_code, ended.behaviour) == (code, code, behaviour)
    assert ended.reason.startswith(f"exit code {code}: ")
    assert signal in ended.reason


def test_an_oom_kill_is_permanent_whatever_the_exit_code() -> None:
    for code in (137, 1, None):
        ended = classify(code, oom_killed=True)
        assert ended.code == -1200 and ended.phrase == "UserContainerDockerOOMKilled"
        assert ended.behaviour is Behaviour.PERMANENT and ended.exit_code == code
        assert "out of memory" in ended.reason
        assert any("memoryMB" in s for s in ended.solution)
    assert classify(137, oom_killed=True).reason.startswith("exit code 137: ")
    # the backend's own sentence, when it has one, says how much was asked and given
    told = "killed because it used more memory than this machine gave it (asked 4096 MB)"
    ended = classify(137, oom_killed=True, oom_reason=told)
    assert ended.reason == f"exit code 137: {told}" and ended.code == -1200


@pytest.mark.parametrize(
    "log",
    [
        "sh: train-model: not found\n",  # busybox sh
        "bash: line 1: train-model: command not found\n",
    ],
)
def test_a_command_that_does_not_exist_is_a_permanent_user_error(log: str) -> None:
    ended = classify(127, log_tail="starting\n" + log)
    assert ended.code == 220 and ended.exit_code == 127
    assert ended.behaviour is Behaviour.PERMANENT
    assert "train-model" in ended.reason and ended.reason.startswith("exit code 127: ")


def test_127_without_the_message_is_not_guessed() -> None:
    ended = classify(127, log_tail="all good so far\n")
    assert ended.code == 127 and ended.behaviour is Behaviour.UNKNOWN


def test_known_failures_in_the_log_tail_are_recognised() -> None:
    log = (
        "Traceback (most recent call last):\n  File 'x.py'\n"
        "ModuleNotFoundError: No module named 'torch'\n"
    )
    ended = classify(1, log_tail=log)
    assert ended.phrase == "ContainerImportError" and ended.behaviour is Behaviour.PERMANENT
    assert ended.exit_code == 1 and "No module named 'torch'" in ended.reason
    # only the end of a long log counts
    long_log = log + "x" * (exit_codes.LOG_TAIL_BYTES + 10)
    assert classify(1, log_tail=long_log).code == 1


@pytest.mark.parametrize("code", [1, 2, 3, 42, 220, 254, 255, 256, 300])
def test_an_unrecognised_exit_keeps_its_code_and_is_retried_up_to_the_retry_count(code) -> None:
    ended = classify(code)
    assert ended.exit_code == code
    # a code the table gives another meaning (254: missing image) is not reported as that
    assert ended.code == (255 if code in table() else code)
    assert ended.phrase == "PAIRuntimeUnknownFailed"
    assert ended.behaviour is Behaviour.UNKNOWN and ended.reaction is Reaction.RETRY_TO_MAX
    assert ended.reason.startswith(f"exit code {code}: ")


def test_an_unrecognised_signal_is_still_named() -> None:
    ended = classify(129)
    assert ended.behaviour is Behaviour.UNKNOWN and "SIGHUP" in ended.reason


@pytest.mark.parametrize(
    "message",
    [
        "No such image: paigraph/missing:1",
        "pull access denied for nobody/nothing, repository does not exist",
        "image paigraph/missing:1 not found",
        "manifest unknown",
    ],
)
def test_a_missing_image_is_permanent_with_a_clear_reason(message: str) -> None:
    ended = classify(None, start_failed_reason=message)
    assert ended.code == 254 and ended.phrase == "ContainerImageNotExists"
    assert ended.behaviour is Behaviour.PERMANENT
    assert ended.reason.startswith("could not start: ") and message in ended.reason
    assert "image" in ended.reason


@pytest.mark.parametrize(
    ("message", "code", "behaviour"),
    [
        ("Bind for 0.0.0.0:15001 failed: port is already allocated", 253, Behaviour.TRANSIENT),
        ('exec: "/bin/sh": executable file not found in $PATH', -1203, Behaviour.PERMANENT),
        (
            "invalid mount config for type bind: source path does not exist",
            -1201,
            Behaviour.UNKNOWN,
        ),
        ("", -1201, Behaviour.UNKNOWN),
    ],
)
def test_other_start_failures(message: str, code: int, behaviour: Behaviour) -> None:
    ended = classify(None, start_failed_reason=message)
    assert (ended.code, ended.behaviour) == (code, behaviour)
    assert ended.reason.startswith("could not start: ")


def test_negative_codes_and_lost_instances() -> None:
    assert classify(-101).phrase == "PodExternalDeleted"
    undefined = classify(-5)
    assert undefined.code == -5 and undefined.phrase == "ContainerUndefinedNegativeExitCode"
    lost = exit_codes.vanished("container gone after a restart")
    assert lost.behaviour is Behaviour.TRANSIENT and lost.exit_code is None
    assert "container gone after a restart" in lost.reason
    assert classify(None).behaviour is Behaviour.TRANSIENT  # ended without any exit code


def test_spec_for_falls_back_by_sign() -> None:
    assert spec_for(7).code == 255
    assert spec_for(-7).code == -8000
    assert spec_for(137).phrase == "ContainerSigKillReceived"


@given(
    st.integers(min_value=-10_000, max_value=10_000),
    st.booleans(),
    st.text(max_size=200),
)
def test_any_exit_gets_a_reason_and_a_behaviour_consistent_with_the_table(
    code: int, oom: bool, log: str
) -> None:
    ended = classify(code, oom_killed=oom, log_tail=log)
    assert ended.exit_code == code
    assert ended.reason.startswith(f"exit code {code}: ")
    assert ended.succeeded == (code == 0 and not oom)
    spec = spec_for(ended.code)
    assert (ended.phrase, ended.behaviour, ended.reaction) == (
        spec.phrase,
        spec.behaviour,
        spec.reaction,
    )
    if ended.code not in table():
        assert ended.code == code and ended.behaviour is Behaviour.UNKNOWN
