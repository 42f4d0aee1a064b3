"""Classify how an instance ended: which exit-code entry applies, whether a retry can help, and
the sentence the user sees ("exit code 137: killed by SIGKILL ...").

The backend reports facts (an exit code, an OOM kill, a start error, the end of the log); this
module turns them into an `ExitInfo` with OpenPAI's completion codes and retry behaviour, so the
retry policy can decide without knowing anything about containers.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping
from functools import cache

from pydantic import BaseModel, ConfigDict

from server.jobs.exit_table import ROWS
from server.shapes.exit_info import (
    ATTEMPT_COMPLETED,
    CREATION_REFUSED,
    ENGINE_FAILED,
    INSTANCE_VANISHED,
    OWN_CODES,
    PREREQUISITE_FETCH_REFUSED,
    START_DEPENDENCY_FAILED,
    STOP_CODES,
    STOP_REQUESTED,
    SUCCEEDED,
    UNDEFINED_NEGATIVE,
    UNRECOGNISED_FAILURE,
    Behaviour,
    ExitInfo,
    Reaction,
)

# The stored shape of an end and its codes are re-exported: this module is where the engine
# looks them up beside the table.
__all__ = [
    "ATTEMPT_COMPLETED",
    "CREATION_REFUSED",
    "ENGINE_FAILED",
    "INSTANCE_VANISHED",
    "LOG_TAIL_BYTES",
    "OWN_CODES",
    "PREREQUISITE_FETCH_REFUSED",
    "START_DEPENDENCY_FAILED",
    "STOP_CODES",
    "STOP_REQUESTED",
    "SUCCEEDED",
    "UNDEFINED_NEGATIVE",
    "UNRECOGNISED_FAILURE",
    "Behaviour",
    "ExitInfo",
    "ExitSpec",
    "Reaction",
    "classify",
    "info",
    "spec_for",
    "table",
    "vanished",
]


LOG_TAIL_BYTES = 16 * 1024  # how much of the end of the log is searched for known failures


class ExitSpec(BaseModel):
    """One row of the exit-code table."""

    model_config = ConfigDict(frozen=True)

    code: int
    phrase: str
    behaviour: Behaviour
    reaction: Reaction
    description: str
    solution: tuple[str, ...] = ()


@cache
def table() -> Mapping[int, ExitSpec]:
    """Every entry of paigraph's exit-code table by code."""
    return {
        code: ExitSpec(
            code=code,
            phrase=phrase,
            behaviour=Behaviour(behaviour),
            reaction=Reaction(reaction),
            description=description,
            solution=solution,
        )
        for code, phrase, behaviour, reaction, description, solution in ROWS
    }


def spec_for(code: int) -> ExitSpec:
    """The entry for a code; unknown codes get the 'not recognised' entry of their sign."""
    entries = table()
    if code in entries:
        return entries[code]
    return entries[UNRECOGNISED_FAILURE if code > 0 else UNDEFINED_NEGATIVE]


def info(code: int, reason: str | None = None, *, exit_code: int | None = None) -> ExitInfo:
    """An ExitInfo for a known completion code; `reason` replaces the table's description."""
    spec = spec_for(code)
    return _info(spec, code=code, exit_code=exit_code, reason=reason or spec.description)


def vanished(detail: str | None = None) -> ExitInfo:
    """An instance that disappeared without an exit being observed."""
    spec = spec_for(INSTANCE_VANISHED)
    text = f"lost: {detail}; {spec.description}" if detail else f"lost: {spec.description}"
    return _info(spec, code=INSTANCE_VANISHED, exit_code=None, reason=text)


def classify(
    exit_code: int | None,
    *,
    oom_killed: bool = False,
    start_failed_reason: str | None = None,
    oom_reason: str | None = None,
    log_tail: str = "",
) -> ExitInfo:
    """Classify how an instance ended from what the backend observed.

    A start failure by its message, an OOM kill as permanent (with `oom_reason`'s sentence when
    given), else the exit code and the log's end; an unrecognised code keeps its value and is
    retried up to the retry count (docs/architecture.md, The job machine's rules).
    """
    if start_failed_reason is not None:
        return _start_failure(start_failed_reason.strip() or "unknown error", exit_code)
    if oom_killed:
        spec = spec_for(-1200)
        prefix = f"exit code {exit_code}: " if exit_code is not None else ""
        said = oom_reason or spec.description
        return _info(spec, code=spec.code, exit_code=exit_code, reason=prefix + said)
    if exit_code is None:
        return vanished("it ended without an exit code")
    if exit_code == SUCCEEDED:
        spec = spec_for(SUCCEEDED)
        return _info(spec, code=0, exit_code=0, reason=f"exit code 0: {spec.description}")
    if exit_code < 0:
        spec = spec_for(exit_code)
        return _info(
            spec,
            code=exit_code,
            exit_code=exit_code,
            reason=f"exit code {exit_code}: {spec.description}",
        )
    return _container_failure(exit_code, log_tail[-LOG_TAIL_BYTES:])


# --- matching ------------------------------------------------------------------------------

# Container exit codes that are an entry of their own: 128 + the number of a signal.
_SIGNAL_CODES = frozenset({130, 131, 132, 134, 135, 136, 137, 139, 141, 143})

# (entry, exit code it applies to or None for any failure, pattern searched in the log tail);
# the first match wins, so the specific entries come first.
_LOG_RULES: tuple[tuple[int, int | None, str], ...] = (
    (220, 127, r"not found"),  # busybox: "sh: foo: not found"; bash: "foo: command not found"
    (220, 126, r"permission denied|cannot execute|not executable"),
    (221, None, r"ResourceExhaustedError.*\bOOM\b|ran out of memory trying to allocate"),
    (226, None, r"CUDA out of memory|cuda runtime error \(2\) : out of memory"),
    (223, None, r"CUDA_ERROR_ECC_UNCORRECTABLE"),
    (224, None, r"CUDA driver version is insufficient for CUDA runtime version"),
    (222, None, r"Signal code: Address not mapped"),
    (228, None, r"unknown option|unrecognized arguments:"),
    (229, None, r"FileNotFoundError: \[Errno 2\]|UnicodeDecodeError|EOFError: Ran out of input"),
    (230, None, r"Restore called with invalid save path"),
    (231, None, r"SyntaxError: |NameError: name .* is not defined"),
    (232, None, r"(ImportError|ModuleNotFoundError): "),
    (233, None, r"IndexError: .*out of range"),
    (234, None, r"segmentation fault"),
    (235, None, r"core dumped"),
)

# Start errors as container engines word them; the first match wins.
_START_RULES: tuple[tuple[int, str], ...] = (
    (PREREQUISITE_FETCH_REFUSED, r"paigraph does not fetch from"),  # the fetch policy's refusal
    (
        254,
        r"no such image|pull access denied|manifest unknown|repository does not exist"
        r"|unable to find image|failed to resolve reference|invalid reference format"
        r"|image\b.*\bnot (found|known)|not found: manifest",
    ),
    (-1205, r"unknown device id|could not select device driver"),
    (253, r"port is already allocated|address already in use"),
    (-1202, r"permission denied"),
    (-1203, r"executable file not found|exec: .*no such file or directory"),
)


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE | re.MULTILINE)


def _container_failure(exit_code: int, log_tail: str) -> ExitInfo:
    if exit_code in _SIGNAL_CODES:
        spec = spec_for(exit_code)
        return _info(
            spec,
            code=exit_code,
            exit_code=exit_code,
            reason=f"exit code {exit_code}: {spec.description}",
        )
    for code, only_for, pattern in _LOG_RULES:
        if only_for is not None and only_for != exit_code:
            continue
        found = _compiled(pattern).search(log_tail)
        if found is None:
            continue
        spec = spec_for(code)
        line = _line_around(log_tail, found.start())
        text = f"exit code {exit_code}: {spec.description} (the log says: {line!r})"
        return _info(spec, code=code, exit_code=exit_code, reason=text)
    spec = spec_for(UNRECOGNISED_FAILURE)
    text = f"exit code {exit_code}: {spec.description}"
    name = _signal_name(exit_code)
    if name:
        text = f"exit code {exit_code}: killed by {name}; the cause was not recognised"
    # Keep the container's own code unless the table gives that number another meaning.
    code = UNRECOGNISED_FAILURE if exit_code in table() else exit_code
    return _info(spec, code=code, exit_code=exit_code, reason=text)


def _start_failure(detail: str, exit_code: int | None) -> ExitInfo:
    for code, pattern in _START_RULES:
        if _compiled(pattern).search(detail):
            spec = spec_for(code)
            break
    else:
        spec = spec_for(-1201)
    text = f"could not start: {detail} ({spec.description})"
    return _info(spec, code=spec.code, exit_code=exit_code, reason=text)


def _line_around(text: str, at: int, limit: int = 200) -> str:
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    line = text[start : end if end >= 0 else len(text)].strip()
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _signal_name(exit_code: int) -> str | None:
    if not 128 < exit_code < 128 + 65:
        return None
    try:
        return signal.Signals(exit_code - 128).name
    except ValueError:
        return None


def _info(spec: ExitSpec, *, code: int, exit_code: int | None, reason: str) -> ExitInfo:
    return ExitInfo(
        code=code,
        exit_code=exit_code,
        phrase=spec.phrase,
        behaviour=spec.behaviour,
        reaction=spec.reaction,
        reason=reason,
        solution=spec.solution,
    )
