"""How long a `paigraph` client command takes to start, beside Python's and typer's own start.

    python bench/cli_startup.py [--rounds 15]

Every command runs as a fresh process of this interpreter (`python -m server.cli ...`), as a
user's shell runs it; what it costs is mostly importing. Two baselines are measured in the
same run, interleaved round by round with the commands so drift in machine speed hits all
alike:

  python      python -c pass             the interpreter alone (site, the venv's .pth files)
  typer       python -c "import typer"   the least any typer command can cost

and the commands:

  --help             paigraph --help
  --version          paigraph --version
  market list -h     paigraph market list --help
  submit -h          paigraph submit --help
  status (down)      paigraph status JOB against a port where nothing listens (exits 1)

Wall time is measured around each process, CPU time (user + system) is the child's own from
wait4. Prints, per command, the median wall and CPU time and their ratios to each baseline's
median. Ratios move less than the times themselves with what else the machine runs.
Prints figures only; exits 0.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time


def _closed_port() -> int:
    """A local port that nothing listens on (one the system just gave out and took back)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _targets() -> dict[str, list[str]]:
    py = sys.executable
    cli = [py, "-m", "server.cli"]
    return {
        "python": [py, "-c", "pass"],
        "typer": [py, "-c", "import typer"],
        "--help": [*cli, "--help"],
        "--version": [*cli, "--version"],
        "market list -h": [*cli, "market", "list", "--help"],
        "submit -h": [*cli, "submit", "--help"],
        "status (down)": [
            *cli,
            "status",
            "some-job",
            "--url",
            f"http://127.0.0.1:{_closed_port()}",
        ],
    }


def _once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of `argv`."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, _, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = 0  # reaped by wait4: Popen must not wait for it again
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="runs of each command (median)")
    rounds = parser.parse_args().rounds
    targets = _targets()
    env = dict(os.environ, PAIGRAPH_TOKEN="", COLUMNS="100")
    for argv in targets.values():  # warm the file cache and the .pyc files first
        _once(argv, env)
    walls: dict[str, list[float]] = {name: [] for name in targets}
    cpus: dict[str, list[float]] = {name: [] for name in targets}
    for _ in range(rounds):
        for name, argv in targets.items():
            wall_seconds, cpu_seconds = _once(argv, env)
            walls[name].append(wall_seconds)
            cpus[name].append(cpu_seconds)
    wall = {name: statistics.median(times) for name, times in walls.items()}
    cpu = {name: statistics.median(times) for name, times in cpus.items()}

    print(f"interpreter: {sys.executable}")
    print(f"rounds: {rounds}, medians; ratios are to the baselines' medians of this run")
    print(
        f"{'':>15} {'wall ms':>8} {'cpu ms':>8}   {'wall/python':>11} {'cpu/python':>10}"
        f"   {'wall/typer':>10} {'cpu/typer':>9}"
    )
    for name in targets:
        print(
            f"{name:>15} {wall[name] * 1e3:8.0f} {cpu[name] * 1e3:8.0f}"
            f"   {wall[name] / wall['python']:11.2f} {cpu[name] / cpu['python']:10.2f}"
            f"   {wall[name] / wall['typer']:10.2f} {cpu[name] / cpu['typer']:9.2f}"
        )


if __name__ == "__main__":
    main()
    sys.exit(0)
