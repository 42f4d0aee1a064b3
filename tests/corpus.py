"""Access to the shared corpus of real job configs and to the seed documents' examples.

They live beside the repository, in ../shared (CI always has it; a clone may not). Tests that
read them carry the marker `shared("corpus")` (or "seeds", "reference"): tests/conftest.py
skips them, naming the folder, when it is missing, except under CI=true where they fail.
Module-level lists built from the corpus are empty then, so that collection still works.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
CORPUS = SHARED / "corpus"
SEEDS = SHARED / "seeds"

# Files OpenPAI accepts but paigraph deliberately rejects, with the reason.
STRICTER: dict[str, str] = {
    "pai__docs__user__storage.md__block3.json": (
        "its image is the placeholder '<your image name>', which no Docker engine can pull"
    ),
}

_ROW = re.compile(r"^\| `(?P<file>[^`]+)` \|(?P<kind>[^|]*)\|[^|]*\|[^|]*\|(?P<verdict>[^|]*)\|")


@dataclass(frozen=True)
class Entry:
    file: str
    kind: str
    verdict: str

    @property
    def path(self) -> Path:
        return CORPUS / self.file

    @property
    def folder(self) -> str:
        return self.file.split("/", 1)[0] if "/" in self.file else ""


def missing(folder: str) -> Path | None:
    """../shared/<folder> when it is not there, else None."""
    path = SHARED / folder
    return None if path.is_dir() else path


def files_in(folder: Path) -> list[Path]:
    """The entries of a corpus folder, sorted; none when the corpus is missing."""
    return sorted(folder.iterdir()) if folder.is_dir() else []


def index() -> list[Entry]:
    """Every row of corpus/INDEX.md; none when the corpus is missing."""
    entries = []
    if not (CORPUS / "INDEX.md").is_file():
        return entries
    for line in (CORPUS / "INDEX.md").read_text().splitlines():
        match = _ROW.match(line)
        if match:
            entries.append(Entry(match["file"], match["kind"].strip(), match["verdict"].strip()))
    return entries


def top_level(valid: bool) -> list[Entry]:
    return [
        e
        for e in index()
        if not e.folder and e.verdict.removeprefix("v1 ").startswith("VALID") == valid
    ]


def seed_yaml_blocks(seed_prefix: str) -> list[str]:
    """The ```yaml blocks of a seed document, e.g. seed_yaml_blocks('000')."""
    return seed_blocks(seed_prefix, "yaml")


def seed_blocks(seed_prefix: str, language: str) -> list[str]:
    """The fenced blocks of one language of a seed document, e.g. seed_blocks('003', 'js')."""
    (path,) = SEEDS.glob(f"{seed_prefix}_*.txt")
    fence = re.compile(rf"```{re.escape(language)}\n(.*?)```", re.DOTALL)
    return fence.findall(path.read_text(encoding="utf-8"))


def seed_job(seed_prefix: str, name: str, language: str = "yaml") -> str:
    """The block of a seed document that is the job called `name` (a draft `name:` or a
    v1 `"jobName":`), as the seed writes it."""
    named = re.compile(rf"""^\s*("jobName"|name)\s*:\s*"?{re.escape(name)}"?\s*[,#\n]""", re.M)
    (block,) = [b for b in seed_blocks(seed_prefix, language) if named.search(b + "\n")]
    return block
