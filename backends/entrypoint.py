"""The POSIX shell script every task container runs, built from a RoleLaunch.

One script per role does what OpenPAI splits over its runtime (environment, prerequisite checks,
hooks, the user's commands) with nothing but `sh`, since the user's image is all there is in the
container. Its steps and exit codes: docs/architecture.md.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from backends.base import WORK_DIR, Material, RoleLaunch
from backends.ssh_access import sshd_lines

RUNTIME_DIR = "/usr/local/pai"  # the instance's runtime files, written by the backend (read-only)
RUN_DIR = f"{RUNTIME_DIR}/run"  # what the instance writes (read-write)
ENV_FILE = f"{RUNTIME_DIR}/runtime_env.sh"  # written by the backend (runtime_env.shell_env_file)
SSH_DIR = f"{RUNTIME_DIR}/ssh"  # the ssh plugin's keys and peers (backends.ssh_access)
ENTRYPOINT = f"{RUNTIME_DIR}/entrypoint.sh"  # this script; run it as `sh ENTRYPOINT`
LOG_FILE = f"{RUN_DIR}/output.log"  # everything the instance prints
USER_COMMANDS_FILE = f"{RUN_DIR}/user_commands.sh"  # the user's commands, written by the script
TOOLS_DIR = f"{RUNTIME_DIR}/bin"  # stand-ins for commands the image lacks (hdfs), last on PATH

SETUP_FAILED = 1  # exit code when the instance cannot start its commands (missing prerequisite ...)
MARKER = "[paigraph]"  # prefix of the lines the script itself writes to the log

_SIGNALS = (("TERM", 15), ("INT", 2), ("HUP", 1))


def entrypoint_script(
    role: RoleLaunch,
    *,
    runtime_dir: str = RUNTIME_DIR,
    work_dir: str = WORK_DIR,
    ssh: bool = False,
    notes: Sequence[str] = (),
) -> str:
    """The entrypoint of an instance of `role`.

    `runtime_dir` and `work_dir` default to the paths inside the container; other values let the
    same script run on the host (the tests do). `ssh` starts an sshd first where the image has
    one; `notes` are printed right after the start line (what is simulated, e.g. the GPUs).
    """
    prologue = _prologue(role, runtime_dir, work_dir, notes)
    if ssh:
        prologue += sshd_lines(_inside(runtime_dir, SSH_DIR))
    text = "\n".join([*prologue, *_body(role, runtime_dir)])
    if "\0" in text:
        raise ValueError(f"task role {role.name!r}: a command contains a NUL byte")
    return text + "\n"


def user_commands(role: RoleLaunch) -> str:
    """The role's commands as one script: each trimmed, joined by newlines, as OpenPAI does."""
    return "\n".join(command.strip() for command in role.commands)


def _prologue(role: RoleLaunch, runtime_dir: str, work_dir: str, notes: Sequence[str]) -> list[str]:
    q = shlex.quote
    log, env_file = _inside(runtime_dir, LOG_FILE), _inside(runtime_dir, ENV_FILE)
    run_dir = _inside(runtime_dir, RUN_DIR)
    tools = _inside(runtime_dir, TOOLS_DIR)
    traps = [f"trap 'on_signal {name} {128 + number}' {name}" for name, number in _SIGNALS]
    ignored = " ".join(name for name, _ in _SIGNALS)
    return [
        "#!/bin/sh",
        f"# Entrypoint of the instances of task role {_comment(role.name)} (POSIX sh).",
        f"[ -d {q(run_dir)} ] || mkdir -p {q(run_dir)}",
        f"exec >>{q(log)} 2>&1",
        "",
        f"say() {{ printf '%s %s\\n' {q(MARKER)} \"$*\"; }}",
        'finish() { say "instance exits with code $1"; exit "$1"; }',
        'fail_setup() { say "$1"; finish ' + str(SETUP_FAILED) + "; }",
        "",
        "# Under the container's init this shell leads its own process group: a stop signal is",
        "# then passed on to the whole group, grandchildren of the user's commands included.",
        "leads_group() {",
        "  read -r _pg_stat 2>/dev/null </proc/$$/stat || return 1",
        "  _pg_stat=${_pg_stat##*) }",
        "  set -- $_pg_stat",
        '  [ "$3" = "$$" ]',
        "}",
        "_pg_child=",
        "on_signal() {",
        f"  trap '' {ignored}",
        '  say "received SIG$1, stopping"',
        '  if [ -n "$_pg_child" ]; then',
        '    if leads_group; then kill -s TERM 0; else kill -s TERM "$_pg_child"; fi 2>/dev/null',
        '    wait "$_pg_child"',
        "  fi",
        '  finish "$2"',
        "}",
        *traps,
        "",
        "# Run a command in the background and wait for it, so that the traps fire meanwhile.",
        'run() { "$@" & _pg_child=$!; wait "$_pg_child"; _pg_rc=$?; _pg_child=; return $_pg_rc; }',
        "",
        f"say {q(f'task role {role.name}: starting')}",
        *(f"say {q(note)}" for note in notes),
        f"[ -f {q(env_file)} ] || fail_setup {q(f'runtime environment {env_file} is missing')}",
        f". {q(env_file)}",
        "# stand-in commands (hdfs) come last: an image's own come first",
        f'[ -d {q(tools)} ] && export PATH="${{PATH:-/usr/bin:/bin}}:"{q(tools)}',
        f"[ -d {q(work_dir)} ] || mkdir -p {q(work_dir)} 2>/dev/null"
        f" || fail_setup {q(f'cannot create the work directory {work_dir}')}",
        f"cd {q(work_dir)} || fail_setup {q(f'cannot enter the work directory {work_dir}')}",
        *(_check_material(m, work_dir) for m in role.materials),
    ]


def _check_material(material: Material, work_dir: str) -> str:
    path = f"{work_dir}/{material.name}"
    source = f" from {', '.join(material.uris)}" if material.uris else ""
    missing = (
        f"prerequisite {material.name!r} ({material.kind.value}{source}) is not in place:"
        f" {path} is missing"
    )
    if material.optional:  # failurePolicy: ignore: start without it, and say so in the log
        note = f"warning: {missing}; its failurePolicy is ignore, so the commands run without it"
        return f"[ -d {shlex.quote(path)} ] || say {shlex.quote(note)}"
    return f"[ -d {shlex.quote(path)} ] || fail_setup {shlex.quote(missing)}"


def _body(role: RoleLaunch, runtime_dir: str) -> list[str]:
    q = shlex.quote
    commands_file = _inside(runtime_dir, USER_COMMANDS_FILE)
    hooks = role.hooks
    lines = [
        "",
        "on_failure() {",
        *(
            _hook(hook, "failure", i, len(hooks.on_failure))
            for i, hook in enumerate(hooks.on_failure)
        ),
        "  :",
        "}",
        "",
    ]
    for i, hook in enumerate(hooks.on_start):
        lines.append(_fatal_hook(hook, "start", i, len(hooks.on_start)))
    lines += [
        f"_pg_commands={q(user_commands(role))}",
        f"printf '%s\\n' \"$_pg_commands\" >{q(commands_file)}"
        f" || fail_setup {q(f'cannot write {commands_file}')}",
        'say "user commands: starting"',
        f"run sh {q(commands_file)}",
        "_pg_code=$?",
        'say "user commands exited with code $_pg_code"',
        'if [ "$_pg_code" -ne 0 ]; then on_failure; finish "$_pg_code"; fi',
    ]
    for i, hook in enumerate(hooks.on_success):
        lines.append(_fatal_hook(hook, "success", i, len(hooks.on_success)))
    lines.append("finish 0")
    return lines


def _hook(command: str, phase: str, i: int, total: int) -> str:
    """A failure hook: run it, log a failure, go on with the next one."""
    name = f"{phase} hook {i + 1}/{total}"
    return (
        f"  say {shlex.quote(name)}; run sh -ec -- {shlex.quote(command)}"
        f' || say "{name} failed with exit code $?"'
    )


def _fatal_hook(command: str, phase: str, i: int, total: int) -> str:
    """A start or success hook: its failure fails the instance with its exit code."""
    name = f"{phase} hook {i + 1}/{total}"
    return "\n".join(
        [
            f"say {shlex.quote(name)}",
            f"run sh -ec -- {shlex.quote(command)}",
            "_pg_code=$?",
            'if [ "$_pg_code" -ne 0 ]; then',
            f'  say "{name} failed with exit code $_pg_code"',
            "  on_failure",
            '  finish "$_pg_code"',
            "fi",
        ]
    )


def _inside(runtime_dir: str, path: str) -> str:
    """`path`, one of the files in RUNTIME_DIR, moved to `runtime_dir`."""
    return f"{runtime_dir}/{path.removeprefix(RUNTIME_DIR + '/')}"


def _comment(text: str) -> str:
    return " ".join(text.split())
