"""Nothing in the backends and the simulator swallows an exception silently: every catch-all
(`except Exception`, a bare `except`, `contextlib.suppress(Exception)`) logs what it caught and
what happens next, or raises. A fault is then always in the log, never a deaf server."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("backends", "simulator")
LOG_CALLS = {"debug", "info", "warning", "error", "exception", "critical"}
BROAD = {"Exception", "BaseException"}


def _broad(node: ast.expr | None) -> bool:
    if node is None:
        return True  # a bare except
    names = node.elts if isinstance(node, ast.Tuple) else [node]
    return any(isinstance(n, ast.Name) and n.id in BROAD for n in names)


def _logs_or_raises(handler: ast.ExceptHandler) -> bool:
    for node in ast.walk(ast.Module(body=handler.body, type_ignores=[])):
        if isinstance(node, ast.Raise):
            return True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in LOG_CALLS
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in ("log", "logger", "logging")
        ):
            return True
    return False


def silent_catches(source: str, name: str) -> list[str]:
    """Where `source` catches everything without logging or raising."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ExceptHandler) and _broad(node.type) and not _logs_or_raises(node):
            found.append(f"{name}:{node.lineno}: except without a log or a raise")
        if isinstance(node, ast.With):
            for item in node.items:
                call = item.context_expr
                if (
                    isinstance(call, ast.Call)
                    and getattr(call.func, "attr", getattr(call.func, "id", "")) == "suppress"
                    and any(_broad(arg) for arg in call.args)
                ):
                    found.append(f"{name}:{node.lineno}: suppress(Exception) hides what it caught")
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_every_catch_all_logs_what_it_caught(package: str) -> None:
    silent = [
        where
        for path in sorted((ROOT / package).glob("*.py"))
        for where in silent_catches(path.read_text(), f"{package}/{path.name}")
    ]
    assert silent == []


def test_the_check_finds_a_silent_catch() -> None:
    source = (
        "import contextlib\n"
        "def a():\n    try:\n        pass\n    except Exception:\n        pass\n"
        "def b():\n    with contextlib.suppress(Exception):\n        pass\n"
        "def c():\n    try:\n        pass\n    except Exception as exc:\n"
        "        log.warning('x %s; going on', exc)\n"
    )
    assert sorted(silent_catches(source, "m")) == [
        "m:5: except without a log or a raise",
        "m:8: suppress(Exception) hides what it caught",
    ]
