# shellcheck shell=bash
# Sourced by scripts/serve and scripts/test (never run on its own): makes sure the project's
# virtual environment holds paigraph, installed editable with the extras asked for, and puts
# it first on PATH. pip never installs into the interpreter that made the environment: Debian
# and Ubuntu refuse that (externally-managed-environment), and elsewhere it would mix
# paigraph's dependencies and test tools into the user's own Python.
#
# The environment is made once and reused while pyproject.toml and the extras are those it was
# installed with (a stamp file inside it records them). PAIGRAPH_VENV moves it (default
# .venv in the repository); PAIGRAPH_PYTHON is the interpreter that makes it (default python3).

PAIGRAPH_MIN_PYTHON="3.11"

# The stamp of what is wanted: pyproject.toml's hash, then the extras.
paigraph_venv_stamp() {
    local extras="$1" hash
    hash="$(sha256sum pyproject.toml)"
    printf '%s %s\n' "${hash%% *}" "$extras"
}

# True when the environment was installed from this pyproject.toml with `extras` (no extras
# are wanted: any install of this pyproject.toml has the base dependencies).
paigraph_venv_current() {
    local stamp_file="$1" extras="$2" recorded wanted
    [[ -f "$stamp_file" ]] || return 1
    recorded="$(cat "$stamp_file")"
    wanted="$(paigraph_venv_stamp "$extras")"
    [[ "$recorded" == "$wanted" ]] && return 0
    [[ -z "$extras" && "${recorded%% *}" == "${wanted%% *}" ]]
}

# Make the environment at `venv` with `python`, saying what is missing when it cannot.
paigraph_venv_create() {
    local venv="$1" python="$2"
    if ! command -v "$python" >/dev/null 2>&1; then
        echo "error: $python not found; paigraph needs Python $PAIGRAPH_MIN_PYTHON or later" >&2
        echo "(set PAIGRAPH_PYTHON to the interpreter to use)" >&2
        return 1
    fi
    if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
        echo "error: $python is Python $("$python" -c 'import platform; print(platform.python_version())');" \
            "paigraph needs $PAIGRAPH_MIN_PYTHON or later (set PAIGRAPH_PYTHON to another)" >&2
        return 1
    fi
    if ! "$python" -c 'import ensurepip, venv' >/dev/null 2>&1; then
        echo "error: $python cannot make virtual environments (no venv or ensurepip module)." >&2
        echo "On Debian or Ubuntu: apt-get install python3-venv" >&2
        return 1
    fi
    echo "==> making the virtual environment $venv with $(command -v "$python")" >&2
    if ! "$python" -m venv --clear "$venv" >&2; then
        rm -rf "$venv"
        return 1
    fi
}

# Make or reuse the environment, install paigraph with `extras` (e.g. "test") when pyproject.toml
# or the extras changed, and put the environment first on PATH.
paigraph_venv() {
    local extras="${1:-}"
    local venv="${PAIGRAPH_VENV:-$PWD/.venv}"
    local python="${PAIGRAPH_PYTHON:-python3}"
    local stamp_file="$venv/.paigraph-installed"
    if ! "$venv/bin/python" -c '' >/dev/null 2>&1; then
        paigraph_venv_create "$venv" "$python" || return 1
    fi
    if ! paigraph_venv_current "$stamp_file" "$extras"; then
        echo "==> installing paigraph${extras:+ [$extras]} and its dependencies into $venv" \
            "(a few minutes the first time; again only when pyproject.toml changes)" >&2
        rm -f "$stamp_file"
        # pip's own lines (one per package it collects and installs) are the progress; they go
        # to stderr, as every other step's, so that stdout stays the commands' own
        PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/python" -m pip install --progress-bar off \
            -e ".${extras:+[$extras]}" >&2 || return 1
        echo "==> paigraph${extras:+ [$extras]} is installed in $venv" >&2
        paigraph_venv_stamp "$extras" >"$stamp_file"
    fi
    export VIRTUAL_ENV="$venv"
    export PATH="$venv/bin:$PATH"
    hash -r
}
