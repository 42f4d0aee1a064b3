"""Hostile job configs at volume: mutations of real configs, and what a good answer is.

`Mutator(seed)` turns the configs of ../shared/corpus and examples/ into mutated documents
(bytes): types swapped, fields deleted and duplicated, huge and deep values, anchors and
aliases (billion laughs), YAML tags, invalid UTF-8, 10,000 roles, bytes flipped. The same seed
gives the same documents, so a failure found in CI is found again on a laptop.

`check(document)` sends one through the protocol engine (what `paigraph validate` runs) and
says what was wrong with the answer: an exception, an answer slower than the bound, or an
error without a code, a message or a path. tests/protocol/test_fuzz.py and bench/fuzz.py use both.
"""

from __future__ import annotations

import copy
import json
import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from server.protocol.engine import parse_document

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
EXAMPLES = ROOT / "examples"
TIME_BOUND = 2.0  # seconds one document may take, at most
SUFFIXES = (".yaml", ".yml", ".json")


def seed_documents() -> list[tuple[str, str]]:
    """(name, text) of every config of the corpus (top level, drafts, components, invalid)
    and of examples/; none of the corpus when it is missing."""
    files: list[Path] = []
    for folder in (CORPUS, CORPUS / "drafts", CORPUS / "components", CORPUS / "invalid"):
        if folder.is_dir():
            files += sorted(p for p in folder.iterdir() if p.suffix in SUFFIXES)
    files += sorted(p for p in EXAMPLES.rglob("*") if p.suffix in SUFFIXES)
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        found.append((str(path.relative_to(path.parents[1])), text))
    return found


def _yaml(tree: Any, **options: Any) -> str:
    """YAML text of a tree, by libyaml (PyYAML's Python writer takes seconds on huge values)."""
    return yaml.dump(tree, Dumper=_DUMPER, **options)


_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _parsed(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


@dataclass(frozen=True)
class Mutant:
    label: str  # the mutation and the document it started from
    data: bytes


BILLION_LAUGHS = "\n".join(
    [
        "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]",
        *(
            f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]"
            for i in range(8)
        ),
        "protocolVersion: 2",
        "name: laughs",
        "type: job",
        "taskRoles: *i",
    ]
)
TAGS = (
    "!!python/object/apply:os.system ['touch /tmp/pwned']",
    "!!python/name:os.system",
    "!!binary aGVsbG8=",
    "!!set {a, b}",
    "!!omap [a: 1, b: 2]",
    "!!timestamp 2001-12-14t21:59:43.10-05:00",
    "!!float .nan",
    "!!float -.inf",
    "!!int 0x7fffffffffffffffffffff",
    "!!str 12",
    "!custom value",
    "!<tag:example.com,2000:app/foo> bar",
    "!!null ''",
    "!!bool yes",
)
ODD_VALUES: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    -1,
    2**63,
    -(2**70),
    1.5,
    math.inf,
    "",
    " ",
    "x",
    "0",
    "-1",
    "true",
    "null",
    "<% $parameters.missing %>",
    "<% $secrets.x %>",
    "$$missing$$",
    "marketplace://name/nothing",
    "http://127.0.0.1:1/x",
    "file:///etc/passwd",
    "../../etc/passwd",
    "a\u0000b",
    "\u202e\ufeff\u200b",
    "\U0001f600" * 10,
    [],
    {},
    [1, "a", None],
    {"a": {"b": []}},
)


class Mutator:
    """Mutated documents from the seeds, reproducibly from `seed`."""

    def __init__(self, seed: int, seeds: list[tuple[str, str]] | None = None) -> None:
        self.rng = random.Random(seed)
        self.seeds = seeds if seeds is not None else seed_documents()
        self.trees = [(name, text, _parsed(text)) for name, text in self.seeds]
        self.jobs = [(n, t, d) for n, t, d in self.trees if isinstance(d, dict)]
        self._mutations: list[tuple[str, Callable[[str, str, Any], bytes]]] = [
            ("swap-type", self._swap_type),
            ("delete", self._delete),
            ("duplicate-key", self._duplicate_key),
            ("huge-value", self._huge_value),
            ("deep-value", self._deep_value),
            ("anchors", self._anchors),
            ("billion-laughs", self._billion_laughs),
            ("tag", self._tag),
            ("invalid-utf8", self._invalid_utf8),
            ("many-roles", self._many_roles),
            ("flip-bytes", self._flip_bytes),
            ("truncate", self._truncate),
            ("odd-keys", self._odd_keys),
            ("stacked", self._stacked),
        ]

    def __iter__(self) -> Iterator[Mutant]:
        while True:
            yield self.one()

    def take(self, count: int) -> list[Mutant]:
        return [self.one() for _ in range(count)]

    def one(self) -> Mutant:
        name, mutate = self.rng.choice(self._mutations)
        seed_name, text, tree = self.rng.choice(self.jobs)
        return Mutant(f"{name} of {seed_name}", mutate(seed_name, text, copy.deepcopy(tree)))

    # --- walking a tree ------------------------------------------------------------------------

    def _containers(self, tree: Any) -> list[tuple[Any, Any]]:
        """Every (container, key or index) of the tree, the tree's own root excluded."""
        found: list[tuple[Any, Any]] = []
        stack = [tree]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                for key, value in node.items():
                    found.append((node, key))
                    stack.append(value)
            elif isinstance(node, list):
                for index, value in enumerate(node):
                    found.append((node, index))
                    stack.append(value)
        return found

    def _spot(self, tree: Any) -> tuple[Any, Any] | None:
        spots = self._containers(tree)
        return self.rng.choice(spots) if spots else None

    def _dump(self, tree: Any) -> bytes:
        if self.rng.random() < 0.5:
            return json.dumps(tree, ensure_ascii=self.rng.random() < 0.5, default=str).encode()
        return _yaml(tree, sort_keys=False, allow_unicode=True).encode("utf-8")

    # --- mutations -----------------------------------------------------------------------------

    def _swap_type(self, name: str, text: str, tree: Any) -> bytes:
        for _ in range(self.rng.randint(1, 4)):
            spot = self._spot(tree)
            if spot is not None:
                container, key = spot
                value = self.rng.choice(ODD_VALUES)
                container[key] = (
                    [container[key]] if self.rng.random() < 0.1 else copy.deepcopy(value)
                )
        return self._dump(tree)

    def _delete(self, name: str, text: str, tree: Any) -> bytes:
        for _ in range(self.rng.randint(1, 3)):
            spot = self._spot(tree)
            if spot is not None:
                container, key = spot
                del container[key]
        return self._dump(tree)

    def _duplicate_key(self, name: str, text: str, tree: Any) -> bytes:
        dumped = _yaml(tree, sort_keys=False).splitlines()
        keyed = [i for i, line in enumerate(dumped) if ":" in line and not line.startswith("- ")]
        if keyed:
            i = self.rng.choice(keyed)
            dumped.insert(i + 1, dumped[i])
        out = "\n".join(dumped) + "\n"
        if self.rng.random() < 0.3:  # and JSON's own duplicates
            out = json.dumps(tree, default=str)
            out = out.replace("{", '{"name": "first", ', 1) if out.startswith("{") else out
        return out.encode("utf-8")

    def _huge_value(self, name: str, text: str, tree: Any) -> bytes:
        spot = self._spot(tree)
        if spot is None:
            return self._dump(tree)
        container, key = spot
        size = self.rng.choice((10_000, 200_000, 900_000, 1_100_000))
        container[key] = self.rng.choice(
            (
                "A" * size,
                ["x"] * (size // 4),
                {f"k{i}": i for i in range(size // 20)},
                "<% $parameters.p %>" * (size // 20),
            )
        )
        if self.rng.random() < 0.2:
            return self._dump(tree).replace(b'"A', b"1" + b"0" * 5000 + b', "A', 1)
        return self._dump(tree)

    def _deep_value(self, name: str, text: str, tree: Any) -> bytes:
        spot = self._spot(tree)
        if spot is None:
            return self._dump(tree)
        container, key = spot
        container[key] = "DEEP-PLACEHOLDER"
        depth = self.rng.choice((65, 500, 5_000, 50_000))
        deep = self.rng.choice(
            (
                "[" * depth + "1" + "]" * depth,
                '{"a":' * depth + "1" + "}" * depth,
                "{a: " * depth + "1" + "}" * depth,
            )
        )
        out = json.dumps(tree, default=str).replace('"DEEP-PLACEHOLDER"', deep, 1)
        return out.encode("utf-8")

    def _anchors(self, name: str, text: str, tree: Any) -> bytes:
        if not isinstance(tree, dict) or not tree:
            return self._dump(tree)
        share = {"shared": list(range(50))}
        for container, key in self._containers(tree)[:200]:
            if self.rng.random() < 0.3:
                container[key] = share  # PyYAML writes aliases for the repeated object
        out = _yaml(tree, sort_keys=False)
        if self.rng.random() < 0.3:
            out = "base: &base {cpu: 1, memoryMB: 128}\n" + out.replace(
                "cpu:", "<<: *base\n  cpu:", 1
            )
        if self.rng.random() < 0.2:
            out = out + "loop: &loop [*loop]\n"
        return out.encode("utf-8")

    def _billion_laughs(self, name: str, text: str, tree: Any) -> bytes:
        if self.rng.random() < 0.5:
            return BILLION_LAUGHS.encode()
        levels = self.rng.randint(3, 12)
        lines = ["l0: &l0 [" + ", ".join(["lol"] * 10) + "]"]
        lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels)]
        dumped = _yaml(tree, sort_keys=False)
        return (
            "\n".join(lines)
            + "\n"
            + dumped.replace("commands:", f"x: *l{levels - 1}\n  commands:", 1)
        ).encode()

    def _tag(self, name: str, text: str, tree: Any) -> bytes:
        spot = self._spot(tree)
        if spot is None:
            return self._dump(tree)
        container, key = spot
        container[key] = "TAG-PLACEHOLDER"
        out = _yaml(tree, sort_keys=False, width=10_000)
        tag = self.rng.choice(TAGS)
        out = out.replace("TAG-PLACEHOLDER", tag, 1)
        if self.rng.random() < 0.2:
            out = "%YAML 1.1\n%TAG ! tag:example.com,2000:\n---\n" + out
        return out.encode("utf-8")

    def _invalid_utf8(self, name: str, text: str, tree: Any) -> bytes:
        data = bytearray(text.encode("utf-8"))
        junk = self.rng.choice(
            (
                b"\xff",
                b"\xfe\xff",
                b"\xc3\x28",
                b"\xed\xa0\x80",
                b"\xf4\x90\x80\x80",
                b"\x00",
                b"\x80",
            )
        )
        at = self.rng.randrange(len(data) + 1)
        data[at:at] = junk
        if self.rng.random() < 0.2:
            return b"\xff\xfe" + text.encode("utf-16-le")
        if self.rng.random() < 0.2:
            return json.dumps(tree, default=str).replace('"', '"\\ud800', 1).encode()
        return bytes(data)

    def _many_roles(self, name: str, text: str, tree: Any) -> bytes:
        count = self.rng.choice((101, 1_000, 10_000))
        if isinstance(tree.get("taskRoles"), dict) and tree["taskRoles"]:
            first = next(iter(tree["taskRoles"].values()))
            tree["taskRoles"] = {f"r{i}": first for i in range(count)}
        elif isinstance(tree.get("taskRoles"), list) and tree["taskRoles"]:
            first = tree["taskRoles"][0]
            tree["taskRoles"] = [
                {**first, "name": f"r{i}"} if isinstance(first, dict) else first
                for i in range(count)
            ]
        elif isinstance(tree.get("tasks"), list) and tree["tasks"]:
            first = tree["tasks"][0]
            tree["tasks"] = [
                {**first, "role": f"r{i}"} if isinstance(first, dict) else first
                for i in range(count)
            ]
        else:
            tree["taskRoles"] = {f"r{i}": {"instances": 1} for i in range(count)}
        if self.rng.random() < 0.5:
            return json.dumps(tree, default=str).encode()
        return _yaml(tree, sort_keys=False).encode()

    def _flip_bytes(self, name: str, text: str, tree: Any) -> bytes:
        data = bytearray(text.encode("utf-8"))
        for _ in range(self.rng.randint(1, 8)):
            if not data:
                break
            at = self.rng.randrange(len(data))
            data[at] = (
                ord(self.rng.choice(":{}[]-&*!|>'\"%@`#,? \t\n\\"))
                if self.rng.random() < 0.7
                else self.rng.randrange(256)
            )
        return bytes(data)

    def _truncate(self, name: str, text: str, tree: Any) -> bytes:
        data = text.encode("utf-8")
        return data[: self.rng.randrange(len(data) + 1)]

    def _odd_keys(self, name: str, text: str, tree: Any) -> bytes:
        dumped = _yaml(tree, sort_keys=False)
        odd = self.rng.choice(
            ("1: one", "null: nothing", "? [a, b]\n: c", "? {a: 1}\n: d", "true: yes", "1.5: x",
             "'': empty", "? !!binary aGk=\n: e")
        )  # fmt: skip
        if self.rng.random() < 0.5:
            return (odd + "\n" + dumped).encode()
        lines = dumped.splitlines()
        nested = [i for i, line in enumerate(lines) if line.startswith("  ") and ":" in line]
        if nested:
            i = self.rng.choice(nested)
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            lines.insert(i, indent + odd.replace("\n", "\n" + indent))
        return ("\n".join(lines) + "\n").encode()

    def _stacked(self, name: str, text: str, tree: Any) -> bytes:
        """Several structural mutations at once."""
        for _ in range(self.rng.randint(2, 5)):
            spot = self._spot(tree)
            if spot is None:
                break
            container, key = spot
            if self.rng.random() < 0.5:
                del container[key]
            else:
                container[key] = copy.deepcopy(self.rng.choice(ODD_VALUES))
        return self._dump(tree)


@dataclass
class Checked:
    label: str
    seconds: float
    problem: str | None  # None when the answer was good
    valid: bool = False


def answer_problem(result: Any) -> str | None:
    """What is wrong with a ParseResult as an answer: an invalid document without errors, or
    an error without a code or message."""
    if not result.ok and not result.errors:
        return "refused without an error"
    for issue in result.errors + result.warnings:
        if not isinstance(issue.path, str):
            return f"an issue without a path: {issue!r}"
        if not issue.code or not issue.message or not issue.message.strip():
            return f"an issue without a code or a message: {issue!r}"
        if "Traceback" in issue.message:
            return f"a traceback in a message: {issue.message[:200]}"
    return None


def check(mutant: Mutant, bound: float = TIME_BOUND) -> Checked:
    """Validate one mutated document in-process, as `paigraph validate` does."""
    started = time.perf_counter()
    try:
        result = parse_document(mutant.data)
    except Exception as exc:  # a crash is exactly what the fuzzer looks for
        seconds = time.perf_counter() - started
        return Checked(mutant.label, seconds, f"crashed: {type(exc).__name__}: {exc}"[:500])
    seconds = time.perf_counter() - started
    problem = answer_problem(result)
    if problem is None and seconds > bound:
        problem = f"took {seconds:.2f} s (bound {bound} s)"
    return Checked(mutant.label, seconds, problem, valid=result.ok)


# --- a real server under hostile submissions ---------------------------------------------------

SUBMIT = (
    "mutation($config: String!) { submitJob(input: {config: $config}) {"
    " job { id } errors { path code message } } }"
)
STOP = "mutation($id: ID!) { stopJob(input: {id: $id}) { errors { message } } }"
PROBE = "{ jobs(first: 10) { edges { node { id name state } } } }"


@dataclass
class Hammered:
    """What a server answered to mutated submissions, and how fast a normal query was."""

    sent: int = 0
    accepted: int = 0
    refused: int = 0
    unreadable: int = 0  # 400 or 413: not JSON UTF-8 can carry, or over the body limit
    problems: list[str] = field(default_factory=list)
    submit_seconds: list[float] = field(default_factory=list)
    probe_seconds: list[float] = field(default_factory=list)


def _submission_problem(response: httpx.Response) -> tuple[str | None, str | None]:
    """(problem, accepted job id) of one submitJob answer."""
    if response.status_code in (400, 413):  # not JSON the server can read, or too large
        try:
            message = response.json()["errors"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            return f"HTTP {response.status_code} without an error: {response.text[:300]}", None
        if "Unexpected error" in message or not message.strip():
            return f"HTTP {response.status_code} without a clear error: {message}", None
        return None, None
    if response.status_code != 200:
        return f"HTTP {response.status_code}: {response.text[:300]}", None
    body = response.json()
    if body.get("errors"):
        return f"top-level errors: {json.dumps(body['errors'])[:300]}", None
    payload = (body.get("data") or {}).get("submitJob")
    if payload is None:
        return f"no payload: {response.text[:300]}", None
    if payload["job"] is not None:
        return None, payload["job"]["id"]
    if not payload["errors"]:
        return "refused without an error", None
    for error in payload["errors"]:
        if not error["code"] or not error["message"].strip() or error["path"] is None:
            return f"an error without a code, message or path: {error}", None
    return None, None


def hammer(url: str, mutants: list[Mutant], *, threads: int = 2, token: str = "") -> Hammered:
    """Submit every mutant through `submitJob` from `threads` clients, stopping each accepted
    job at once, while one more client asks PROBE over and over; collect what went wrong."""
    report = Hammered()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    lock = threading.Lock()
    queue = list(reversed(mutants))
    done = threading.Event()

    def submitter() -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            while True:
                with lock:
                    if not queue:
                        return
                    mutant = queue.pop()
                config = mutant.data.decode("utf-8", "surrogateescape")
                started = time.perf_counter()
                try:
                    response = client.post(  # ASCII JSON: a lone surrogate as \udcff
                        "/graphql",
                        content=json.dumps({"query": SUBMIT, "variables": {"config": config}}),
                        headers={"Content-Type": "application/json"},
                    )
                except httpx.HTTPError as exc:
                    with lock:
                        report.problems.append(f"{mutant.label}: {type(exc).__name__} {exc}")
                    continue
                seconds = time.perf_counter() - started
                problem, job_id = _submission_problem(response)
                if job_id is not None:
                    client.post("/graphql", json={"query": STOP, "variables": {"id": job_id}})
                with lock:
                    report.sent += 1
                    report.submit_seconds.append(seconds)
                    report.unreadable += response.status_code in (400, 413)
                    if problem is not None:
                        report.problems.append(f"{mutant.label}: {problem}")
                    elif job_id is not None:
                        report.accepted += 1
                    elif response.status_code == 200:
                        report.refused += 1

    def prober() -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            while not done.is_set():
                started = time.perf_counter()
                response = client.post("/graphql", json={"query": PROBE})
                seconds = time.perf_counter() - started
                with lock:
                    report.probe_seconds.append(seconds)
                    if response.status_code != 200 or response.json().get("errors"):
                        report.problems.append(f"probe: HTTP {response.status_code}")
                done.wait(0.05)

    probe = threading.Thread(target=prober, name="probe")
    probe.start()
    workers = [threading.Thread(target=submitter, name=f"submit-{i}") for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    done.set()
    probe.join()
    return report


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0
