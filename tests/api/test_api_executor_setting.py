"""The executor setting: `fast` (the default) or graphql-core's `standard`, chosen by
PAIGRAPH_EXECUTOR or `serve --executor`; anything else is refused naming the setting."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from server.api.schema import EXECUTOR_ENV, executor_setting, schema_for
from server.app.asgi import create_app
from server.cli.main import app as cli

runner = CliRunner(env={"FORCE_COLOR": None, "TTY_COMPATIBLE": None, "NO_COLOR": "1"})


def test_the_setting_comes_from_the_argument_then_the_environment() -> None:
    assert executor_setting(environ={}) == "fast"
    assert executor_setting(environ={EXECUTOR_ENV: " Standard "}) == "standard"
    assert executor_setting("fast", environ={EXECUTOR_ENV: "standard"}) == "fast"


def test_each_executor_has_its_own_schema_with_the_same_sdl() -> None:
    fast, standard = schema_for("fast"), schema_for("standard")
    assert fast is not standard
    assert fast.execution_context_class.__name__ == "FastExecutionContext"
    # strawberry's own, graphql-core's executor with nothing overridden
    assert standard.execution_context_class.__name__ == "StrawberryGraphQLCoreExecutionContext"
    assert fast.as_str() == standard.as_str()


def test_the_standard_executor_never_imports_the_fast_one() -> None:
    """It keeps serving when graphql-core changes the internals the fast one overrides."""
    check = (
        "import sys\n"
        "from server.app.asgi import create_app\n"
        "create_app(db_url='sqlite://', backend=None, executor='standard')\n"
        "print(sorted(m for m in sys.modules if m.startswith('server.api.execution')))\n"
    )
    run = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"


def test_an_unknown_executor_is_refused_naming_the_setting_and_its_values() -> None:
    with pytest.raises(
        ValueError, match=r"PAIGRAPH_EXECUTOR .* one of fast, standard, got 'quick'"
    ):
        create_app(db_url="sqlite://", backend=None, executor="quick")


def test_serve_refuses_an_unknown_executor_before_listening() -> None:
    result = runner.invoke(cli, ["serve", "--port", "0"], env={EXECUTOR_ENV: "turbo"})
    assert result.exit_code == 2
    assert "PAIGRAPH_EXECUTOR (or --executor) must be one of fast, standard" in result.output
    assert "'turbo'" in result.output
