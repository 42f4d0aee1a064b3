"""How fast the protocol engine reads real job configs, next to plain libyaml.

    python bench/protocol.py

Loads every file of ../shared/corpus (the top-level configs, drafts/ and components/) into
memory, then times, in the same run and over the same files:

  yaml       yaml.load(text, Loader=yaml.CSafeLoader)   (JSON files too: JSON is YAML)
  paigraph   server.protocol.parse_document(text)       (load, detect, validate, normalise)

Each measurement is the best of several rounds, alternated; a round loops over the corpus
enough times to take about half a second. Time is this process's CPU time: both sides are
single-threaded work of this process, and CPU time is what other programs on a busy machine
disturb least (wall-clock time stretches with every other process that runs meanwhile). Files
plain libyaml cannot load are left out of both measurements. The goal is a ratio (paigraph time
/ yaml time) of at most 1.2. Prints figures only; exits 0.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from server.protocol import parse_document  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"
FOLDERS = ("", "drafts", "components")
ROUNDS = 5
ROUND_SECONDS = 0.5
GOAL = 1.2

Loader = yaml.CSafeLoader


def corpus_files() -> list[Path]:
    files: list[Path] = []
    for folder in FOLDERS:
        directory = CORPUS / folder if folder else CORPUS
        files += sorted(
            p for p in directory.iterdir() if p.is_file() and p.suffix in (".yaml", ".yml", ".json")
        )
    return files


def load_texts(files: list[Path]) -> tuple[list[str], list[str]]:
    """The texts both parsers can be timed on, and the names of the files left out (why)."""
    texts, skipped = [], []
    for path in files:
        text = path.read_text(encoding="utf-8-sig")
        name = str(path.relative_to(CORPUS))
        try:
            yaml.load(text, Loader=Loader)
        except yaml.YAMLError:
            skipped.append(f"{name} (libyaml cannot load it)")
            continue
        try:
            parse_document(text)
        except Exception as exc:  # a benchmark reports figures; the tests report crashes
            skipped.append(f"{name} (parse_document raised {type(exc).__name__})")
            continue
        texts.append(text)
    return texts, skipped


def yaml_pass(texts: list[str]) -> None:
    for text in texts:
        yaml.load(text, Loader=Loader)


def paigraph_pass(texts: list[str]) -> None:
    for text in texts:
        parse_document(text)


def one_round(run: Callable[[list[str]], None], texts: list[str], passes: int) -> float:
    gc.collect()
    start = time.process_time()
    for _ in range(passes):
        run(texts)
    return time.process_time() - start


def passes_for(run: Callable[[list[str]], None], texts: list[str]) -> int:
    """How many passes over the corpus make a round of about ROUND_SECONDS."""
    run(texts)  # warm up
    once = one_round(run, texts, 1)
    return max(1, round(ROUND_SECONDS / max(once, 1e-9)))


def main() -> int:
    texts, skipped = load_texts(corpus_files())
    if not texts:
        print(f"no configs found under {CORPUS}")
        return 0
    n = len(texts)
    size = sum(len(t.encode("utf-8")) for t in texts)
    benches = {"yaml": yaml_pass, "paigraph": paigraph_pass}
    passes = {name: passes_for(run, texts) for name, run in benches.items()}
    best = dict.fromkeys(benches, float("inf"))
    for _ in range(ROUNDS):  # interleaved, so drift in machine speed hits both alike
        for name, run in benches.items():
            seconds = one_round(run, texts, passes[name]) / passes[name]
            best[name] = min(best[name], seconds)

    print(f"corpus: {CORPUS}")
    print(f"configs: {n} ({size / 1024:.0f} KiB; {len(skipped)} left out)")
    for line in skipped:
        print(f"  left out: {line}")
    print(f"rounds: best of {ROUNDS}, ~{ROUND_SECONDS} s each")
    for name in benches:
        per_config = best[name] / n
        print(
            f"{name:>9}: {n / best[name]:10.0f} configs/s  "
            f"({per_config * 1e6:8.1f} us/config, {passes[name]} passes/round)"
        )
    ratio = best["paigraph"] / best["yaml"]
    print(f"    ratio: {ratio:.2f} (paigraph time / yaml time)")
    print(f"     goal: ratio <= {GOAL:g}: {'met' if ratio <= GOAL else 'NOT met'}")
    return 0


if __name__ == "__main__":
    main()
    sys.exit(0)
