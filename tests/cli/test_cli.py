"""The `paigraph` command: validate and resolve, their output and their exit codes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from server.cli.main import app
from server.protocol import parse_document, parse_job
from tests.corpus import CORPUS

V2_JOB = CORPUS / "pai__docs__manual__cluster-user__examples__hello-world-job.yaml"
V1_JOB = CORPUS / "pai__docs__user__data.md__block0.json"
DRAFT_JOB = CORPUS / "drafts" / "pai__marketplace__job__pytorch_mnist.yaml"
COMPONENT = CORPUS / "components" / "pai__marketplace__dockerimage__mxnet_example.yaml"

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

runner = CliRunner(env={"FORCE_COLOR": None, "TTY_COMPATIBLE": None, "NO_COLOR": "1"})


def run(*args: str | Path) -> tuple[int, str, str]:
    """Run `paigraph ARGS`; return the exit code, stdout and stderr (without colour codes)."""
    result = runner.invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, _ANSI.sub("", result.stdout), _ANSI.sub("", result.stderr)


def v2_job(cpu: int = 2, memory_mb: int = 4096, gpu: int = 0, role: str = "worker") -> str:
    return yaml.safe_dump(
        {
            "protocolVersion": 2,
            "name": "small_job",
            "type": "job",
            "prerequisites": [{"name": "image", "type": "dockerimage", "uri": "ubuntu:22.04"}],
            "parameters": {"greeting": "hello"},
            "taskRoles": {
                role: {
                    "instances": 2,
                    "dockerImage": "image",
                    "resourcePerInstance": {"cpu": cpu, "memoryMB": memory_mb, "gpu": gpu},
                    "commands": ["echo <% $parameters.greeting %>"],
                }
            },
        },
        sort_keys=False,
    )


@pytest.fixture
def good(tmp_path: Path) -> Path:
    path = tmp_path / "good.yaml"
    path.write_text(v2_job())
    return path


@pytest.fixture
def bad(tmp_path: Path) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(v2_job(cpu=0))
    return path


@pytest.mark.shared("corpus")
def test_the_corpus_files_used_here_exist() -> None:
    for path in (V2_JOB, V1_JOB, DRAFT_JOB, COMPONENT):
        assert path.is_file(), path


# ------------------------------------------------------------------------------ validate


@pytest.mark.shared("corpus")
@pytest.mark.parametrize(
    ("path", "dialect"),
    [
        (V2_JOB, "job in OpenPAI protocol v2"),
        (V1_JOB, "job in OpenPAI v1 JSON"),
        (DRAFT_JOB, "job in draft protocol (tasks list)"),
        (COMPONENT, "dockerimage component"),
    ],
    ids=["v2", "v1", "draft", "component"],
)
def test_validate_says_ok_and_names_the_dialect(path: Path, dialect: str) -> None:
    code, out, _err = run("validate", path)
    assert code == 0, out
    # warnings (the hello-world job's ssh plugin has one) follow on lines of their own
    (line,) = [line for line in out.splitlines() if line.strip() and "warning" not in line]
    assert line.startswith("OK")
    assert str(path) in line
    assert dialect in line
    assert "INVALID" not in out


def test_validate_names_the_job_and_its_roles(good: Path) -> None:
    code, out, _err = run("validate", good)
    assert code == 0
    assert "'small_job'" in out
    assert "worker ×2" in out


def test_validate_counts_the_instances_of_each_role_as_people_write_them() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "ps-worker.yaml"
    code, out, _err = run("validate", example)
    assert code == 0
    assert out.endswith("(task roles: ps_server ×1, worker ×2)\n"), out


@pytest.mark.shared("corpus")
def test_validate_several_valid_files_exits_0_with_one_ok_each(good: Path) -> None:
    files = [V2_JOB, V1_JOB, DRAFT_JOB, COMPONENT, good]
    code, out, _err = run("validate", *files)
    assert code == 0, out
    ok_lines = [line for line in out.splitlines() if line.startswith("OK")]
    assert len(ok_lines) == len(files)
    for path, line in zip(files, ok_lines, strict=True):
        assert str(path) in line


def test_validate_reports_the_path_and_message_of_an_invalid_file(bad: Path) -> None:
    code, out, _err = run("validate", bad)
    assert code == 1
    assert out.startswith("INVALID")
    assert str(bad) in out.splitlines()[0]
    assert "taskRoles.worker.resourcePerInstance.cpu" in out
    (error,) = parse_document(bad.read_bytes()).errors
    assert error.path == "taskRoles.worker.resourcePerInstance.cpu"
    assert error.message in out
    assert f"[{error.code}]" in out


def test_validate_lists_every_error(tmp_path: Path) -> None:
    path = tmp_path / "many.yaml"
    path.write_text(v2_job(cpu=0, memory_mb=50, gpu=-1, role="bad-role"))
    errors = parse_document(path.read_bytes()).errors
    assert len(errors) >= 2
    code, out, _err = run("validate", path)
    assert code == 1
    for error in errors:
        assert f"{error.path}: {error.message}" in out


@pytest.mark.shared("corpus")
def test_validate_exits_1_when_any_file_is_invalid(good: Path, bad: Path) -> None:
    code, out, _err = run("validate", good, bad, V1_JOB)
    assert code == 1
    lines = [line for line in out.splitlines() if not line.startswith(" ")]
    assert [line.split()[0] for line in lines] == ["OK", "INVALID", "OK"]


def test_validate_prints_user_text_verbatim_not_as_markup(tmp_path: Path) -> None:
    path = tmp_path / "markup.yaml"
    path.write_text(v2_job(role="[red]x[/red]"))
    code, out, _err = run("validate", path)
    assert code == 1
    assert "taskRoles.[red]x[/red]" in out


def test_validate_reports_broken_syntax_at_the_document(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("protocolVersion: 2\nname: [unclosed\n")
    code, out, _err = run("validate", path)
    assert code == 1
    assert "INVALID" in out
    (error,) = parse_document(path.read_bytes()).errors
    assert error.code == "yaml-syntax"
    assert f"(document): {error.message}" in out


def test_validate_with_a_job_that_is_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "list.json"
    path.write_text("[1, 2, 3]")
    code, out, _err = run("validate", path)
    assert code == 1
    assert "INVALID" in out
    assert "mapping" in out


def test_validate_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    code, _out, err = run("validate", missing)
    assert code == 2
    assert str(missing) in err


def test_validate_missing_file_among_valid_ones_is_a_usage_error(
    good: Path, tmp_path: Path
) -> None:
    code, _out, _err = run("validate", good, tmp_path / "nope.yaml")
    assert code == 2


def test_validate_a_directory_is_a_usage_error(tmp_path: Path) -> None:
    code, _out, _err = run("validate", tmp_path)
    assert code == 2


def test_validate_without_files_is_a_usage_error() -> None:
    code, _out, _err = run("validate")
    assert code == 2


def test_unknown_option_is_a_usage_error(good: Path) -> None:
    code, _out, _err = run("validate", "--no-such-option", good)
    assert code == 2


def test_unknown_command_is_a_usage_error() -> None:
    code, _out, _err = run("no-such-command")
    assert code == 2


# ------------------------------------------------------------------------- validate --json

REPORT_KEYS = {"file", "valid", "kind", "dialect", "type", "errors", "warnings"}


@pytest.mark.shared("corpus")
def test_validate_json_reports_every_file(good: Path, bad: Path) -> None:
    code, out, _err = run("validate", "--json", good, bad, V1_JOB, DRAFT_JOB, COMPONENT)
    assert code == 1
    reports = json.loads(out)
    assert isinstance(reports, list) and len(reports) == 5
    for report in reports:
        assert set(report) == REPORT_KEYS
        for issue in report["errors"] + report["warnings"]:
            assert set(issue) == {"path", "code", "message"}
    by_file = {Path(r["file"]): r for r in reports}
    assert by_file[good] == {
        "file": str(good),
        "valid": True,
        "kind": "job",
        "dialect": "v2",
        "type": None,
        "errors": [],
        "warnings": by_file[good]["warnings"],
    }
    assert by_file[bad]["valid"] is False
    assert by_file[bad]["kind"] == "job" and by_file[bad]["dialect"] == "v2"
    (error,) = by_file[bad]["errors"]
    expected = parse_document(bad.read_bytes()).errors[0]
    assert error == {"path": expected.path, "code": expected.code, "message": expected.message}
    assert error["path"] == "taskRoles.worker.resourcePerInstance.cpu"
    assert by_file[V1_JOB]["dialect"] == "v1" and by_file[V1_JOB]["valid"] is True
    assert by_file[DRAFT_JOB]["dialect"] == "draft" and by_file[DRAFT_JOB]["valid"] is True
    component = by_file[COMPONENT]
    assert component["valid"] is True
    assert component["kind"] == "component"
    assert component["type"] == "dockerimage"


@pytest.mark.shared("corpus")
def test_validate_json_exits_0_when_all_are_valid(good: Path) -> None:
    code, out, _err = run("validate", "--json", good, COMPONENT)
    assert code == 0
    assert [r["valid"] for r in json.loads(out)] == [True, True]


def test_validate_json_for_an_unreadable_document(tmp_path: Path) -> None:
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\x00\x01\x02")
    code, out, _err = run("validate", "--json", path)
    assert code == 1
    (report,) = json.loads(out)
    assert report["valid"] is False
    assert report["kind"] is None and report["dialect"] is None and report["type"] is None
    (error,) = report["errors"]
    assert error["path"] == "" and error["code"] and error["message"]


def test_validate_json_keeps_messages_that_look_like_markup(tmp_path: Path) -> None:
    # rich markup ([red], [/]) and JSON escapes in user input must come out verbatim
    path = tmp_path / "markup.yaml"
    path.write_text(v2_job(role="[red]x[/red]"))
    code, out, _err = run("validate", "--json", path)
    assert code == 1
    (report,) = json.loads(out)
    expected = parse_document(path.read_bytes()).errors
    assert report["errors"] == [
        {"path": e.path, "code": e.code, "message": e.message} for e in expected
    ]


# ------------------------------------------------------------------------------- resolve


@pytest.mark.shared("corpus")
def test_resolve_renders_parameters_into_v2_yaml() -> None:
    code, out, _err = run("resolve", DRAFT_JOB, "--param", "epochs=7")
    assert code == 0
    doc = yaml.safe_load(out)
    assert doc["protocolVersion"] == 2
    assert doc["parameters"]["epochs"] == 7
    (command,) = doc["taskRoles"]["worker"]["commands"]
    assert "--epochs 7" in command
    assert "$$" not in command
    again = parse_job(out)
    assert again.ok, again.errors
    assert again.dialect is not None and again.dialect.value == "v2"


@pytest.mark.shared("corpus")
def test_resolve_uses_the_file_s_defaults_without_params() -> None:
    code, out, _err = run("resolve", DRAFT_JOB)
    assert code == 0
    (command,) = yaml.safe_load(out)["taskRoles"]["worker"]["commands"]
    assert "--epochs 10" in command
    assert "--lr 0.01" in command


@pytest.mark.shared("corpus")
def test_resolve_takes_several_params_and_the_short_option() -> None:
    code, out, _err = run("resolve", DRAFT_JOB, "-p", "epochs=3", "--param", "lr=0.5")
    assert code == 0
    (command,) = yaml.safe_load(out)["taskRoles"]["worker"]["commands"]
    assert "--epochs 3" in command and "--lr 0.5" in command


def test_resolve_renders_v2_parameters(good: Path) -> None:
    code, out, _err = run("resolve", good, "--param", "greeting=bonjour")
    assert code == 0
    doc = yaml.safe_load(out)
    assert doc["protocolVersion"] == 2
    assert doc["taskRoles"]["worker"]["commands"] == ["echo bonjour"]
    assert doc["taskRoles"]["worker"]["instances"] == 2


@pytest.mark.shared("corpus")
def test_resolve_converts_v1_json_to_v2() -> None:
    code, out, _err = run("resolve", V1_JOB)
    assert code == 0
    doc = yaml.safe_load(out)
    assert doc["protocolVersion"] == 2
    assert list(doc["taskRoles"]) == [
        r.name for r in parse_job(V1_JOB.read_bytes()).spec.task_roles
    ]


def test_resolve_an_invalid_file_prints_errors_on_stderr(bad: Path) -> None:
    code, out, err = run("resolve", bad)
    assert code == 1
    assert out == ""
    assert "INVALID" in err
    assert "taskRoles.worker.resourcePerInstance.cpu" in err


@pytest.mark.shared("corpus")
def test_resolve_refuses_a_component(tmp_path: Path) -> None:
    code, out, err = run("resolve", COMPONENT)
    assert code == 1
    assert out == ""
    assert "not-a-job" in err


MULTI_LINE_JOB = """\
protocolVersion: 2
name: loops
type: job
prerequisites:
  - {name: image, type: dockerimage, uri: "ubuntu:22.04"}
parameters: {rounds: 3}
taskRoles:
  worker:
    dockerImage: image
    resourcePerInstance: {cpu: 1, memoryMB: 512, gpu: 0}
    commands:
      - |
        for i in $(seq <% $parameters.rounds %>); do
          echo "round $i: \\"ok\\""
        done
      - echo done
"""


def test_resolve_prints_multi_line_commands_as_blocks_that_read_back(tmp_path: Path) -> None:
    job = tmp_path / "loops.yaml"
    job.write_text(MULTI_LINE_JOB)
    code, out, _err = run("resolve", job)
    assert code == 0
    block = (
        "    - |\n"
        "      for i in $(seq 3); do\n"
        '        echo "round $i: \\"ok\\""\n'
        "      done\n"
        "    - echo done\n"
    )
    assert block in out, out
    assert "\\n" not in out
    assert list(yaml.safe_load(out))[:3] == ["protocolVersion", "name", "type"]
    again = tmp_path / "again.yaml"
    again.write_text(out)
    assert run("resolve", again)[1] == out  # what is printed reads back to the same job


def test_market_use_prints_multi_line_commands_as_blocks() -> None:
    from server.marketplace.items import read_item
    from server.marketplace.use import template_config

    used = template_config(read_item(MULTI_LINE_JOB), {"rounds": 5})
    assert "    - |\n      for i in $(seq <% $parameters.rounds %>); do\n" in used, used
    assert yaml.safe_load(used)["parameters"] == {"rounds": 5}
    assert list(yaml.safe_load(used)) == list(yaml.safe_load(MULTI_LINE_JOB))


def test_resolve_refuses_a_parameter_the_job_does_not_declare(good: Path) -> None:
    code, out, err = run("resolve", good, "--param", "greting=bonjour")
    assert code == 1
    assert out == ""
    assert (
        "parameters.greting: job 'small_job' has no parameter 'greting' (its parameters: "
        "greeting) [unknown-parameter]"
    ) in err


@pytest.mark.shared("corpus")
@pytest.mark.parametrize("param", ["epochs", "=7", ""])
def test_resolve_with_a_malformed_param_is_a_usage_error(param: str) -> None:
    code, out, err = run("resolve", DRAFT_JOB, "--param", param)
    assert code == 2
    assert out == ""
    assert "key=value" in err


def test_resolve_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    code, _out, _err = run("resolve", tmp_path / "nope.yaml")
    assert code == 2


def test_resolve_without_a_file_is_a_usage_error() -> None:
    code, _out, _err = run("resolve")
    assert code == 2


# ----------------------------------------------------------- the installed console script


@pytest.mark.shared("corpus")
def test_the_installed_command_exits_with_the_documented_codes(
    good: Path, bad: Path, tmp_path: Path
) -> None:
    exe = shutil.which("paigraph")
    if exe is None:
        pytest.skip("the paigraph console script is not installed (pip install -e .)")

    def status(*args: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [exe, *map(str, args)], capture_output=True, text=True, timeout=60, check=False
        )

    valid = status("validate", good, V1_JOB, COMPONENT)
    assert valid.returncode == 0, valid.stderr
    assert valid.stdout.count("OK") == 3
    invalid = status("validate", good, bad)
    assert invalid.returncode == 1, invalid.stderr
    assert "taskRoles.worker.resourcePerInstance.cpu" in invalid.stdout
    assert status("validate", tmp_path / "nope.yaml").returncode == 2
    assert status("validate").returncode == 2
    resolved = status("resolve", DRAFT_JOB, "--param", "epochs=7")
    assert resolved.returncode == 0, resolved.stderr
    assert "--epochs 7" in resolved.stdout
    assert status("resolve", DRAFT_JOB, "--param", "epochs").returncode == 2
    assert "Traceback" not in valid.stderr + invalid.stderr + resolved.stderr


def test_version_prints_the_installed_version_on_one_line() -> None:
    code, stdout, _ = run("--version")
    assert code == 0
    assert re.fullmatch(r"paigraph (\d+\.\d+\.\d+\S*|unknown)\n", stdout), stdout
