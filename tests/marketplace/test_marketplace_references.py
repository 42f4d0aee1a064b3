"""Resolving marketplace:// and http(s):// references: require chains with template variables,
visibility, storages and their permissions, components served over HTTP by a real server on
loopback, and a job whose dataset comes from a marketplace item, run on the Docker simulator.

The marketplace here is an in-memory ItemLookup / StorageAccess written for these tests (a real
implementation of the protocol the resolver reads items through, with the same visibility
rules), and an HTTP one for the marketplace-unreachable case.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import docker
import docker.errors
import httpx
import pytest
import yaml

from backends.docker import DockerBackend
from backends.kubernetes_manifests import AttemptBuilder
from backends.kubernetes_settings import KubernetesSettings
from server.app.asgi import create_app
from server.events import bus_for
from server.jobs.launch import launch_request
from server.jobs.service import JobService
from server.marketplace.fetch import ALLOW_ENV, FetchSettings, SettingsError
from server.marketplace.lookup import (
    ItemContent,
    ItemKind,
    StorageDefinition,
    StorageMode,
    Viewer,
)
from server.marketplace.references import (
    ReferenceLimits,
    ReferenceResolver,
    ResolvedReferences,
)
from server.protocol import JobSpec, parse_job, to_v2_yaml
from server.protocol.model import StorageMount
from server.shapes.job_states import JobState
from server.store import open_store
from simulator.fetch_policy import ALLOWED_NETWORKS_ENV, FetchPolicy
from simulator.prereqs import UnservableMaterial, check_storage
from tests.api_support import data, serving
from tests.simulated import IMAGE, remove_leftovers, settings
from tests.waiting import until_async

ANN = Viewer(name="ann")
BOB = Viewer(name="bob")
CARL = Viewer(name="carl", groups=frozenset({"research"}))
LOOPBACK = FetchPolicy.parse("127.0.0.1")  # the test sites listen there


# --- an in-memory marketplace ------------------------------------------------------------------


@dataclass
class Item:
    id: str
    name: str
    owner: str
    kind: ItemKind
    versions: list[tuple[str, str]]  # (version, content), oldest first
    visibility: str = "public"  # public, private or groups
    groups: frozenset[str] = frozenset()

    def visible_to(self, viewer: Viewer) -> bool:
        if viewer.admin or self.visibility == "public" or viewer.name == self.owner:
            return True
        return self.visibility == "groups" and bool(self.groups & viewer.groups)


@dataclass
class Storage:
    definition: StorageDefinition
    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()


@dataclass
class Marketplace:
    """Items and storages in memory, with the visibility and permission rules of the API."""

    items: dict[str, Item] = field(default_factory=dict)
    storages: dict[str, Storage] = field(default_factory=dict)

    def publish(
        self,
        content: str | dict[str, Any],
        *,
        owner: str = "ann",
        kind: ItemKind | None = None,
        version: str = "1",
        **rules: Any,
    ) -> str:
        text = content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False)
        doc = yaml.safe_load(text)
        name = doc.get("name", "template")
        found = next((i for i in self.items.values() if i.name == name), None)
        if found is not None:
            found.versions.append((version, text))
            return found.id
        kind = kind or ItemKind(doc.get("type", "plugin"))
        item_id = str(len(self.items) + 1)
        self.items[item_id] = Item(item_id, name, owner, kind, [(version, text)], **rules)
        return item_id

    def define(
        self,
        name: str,
        source: str,
        mode: StorageMode,
        *,
        volume: bool = False,
        users: tuple[str, ...] = (),
        groups: tuple[str, ...] = (),
    ) -> None:
        definition = StorageDefinition(name=name, source=source, is_volume=volume, mode=mode)
        self.storages[name] = Storage(definition, frozenset(users), frozenset(groups))

    # ItemLookup

    def by_id(self, item_id: str, viewer: Viewer) -> ItemContent | None:
        item = self.items.get(item_id)
        return self._content(item, None, viewer) if item else None

    def by_name(self, name: str, version: str | None, viewer: Viewer) -> ItemContent | None:
        item = next((i for i in self.items.values() if i.name == name), None)
        return self._content(item, version, viewer) if item else None

    def _content(self, item: Item, version: str | None, viewer: Viewer) -> ItemContent | None:
        if not item.visible_to(viewer):
            return None
        chosen = [v for v in item.versions if version is None or v[0] == version]
        if not chosen:
            return None
        number, text = chosen[-1]
        return ItemContent(item.id, item.name, number, item.kind, text)

    # StorageAccess

    def storage(self, name: str) -> StorageDefinition | None:
        found = self.storages.get(name)
        return found.definition if found else None

    def may_use(self, name: str, viewer: Viewer) -> bool:
        found = self.storages.get(name)
        if found is None:
            return False
        return viewer.admin or viewer.name in found.users or bool(found.groups & viewer.groups)


class HttpMarketplace:
    """An ItemLookup on a marketplace REST API (GET <base>/items/<id> answers the item's JSON)."""

    def __init__(self, base: str) -> None:
        self.base = base

    def by_id(self, item_id: str, viewer: Viewer) -> ItemContent | None:
        response = httpx.get(
            f"{self.base}/items/{item_id}", params={"viewer": viewer.name}, timeout=5
        )
        if response.status_code == 404:
            return None
        response.raise_for_status()
        found = response.json()
        return ItemContent(
            found["id"], found["name"], found["version"], ItemKind(found["kind"]), found["content"]
        )

    def by_name(self, name: str, version: str | None, viewer: Viewer) -> ItemContent | None:
        raise NotImplementedError("this marketplace API answers by id only")


# --- a real HTTP server on loopback ------------------------------------------------------------


class Site:
    """Serves documents by path and counts requests; `/slow` answers after 3 s,
    `/stream/N` sends N bytes without a Content-Length, and `redirects` redirect."""

    def __init__(self) -> None:
        self.documents: dict[str, bytes] = {}
        self.hits: dict[str, int] = {}
        self.redirects: dict[str, str] = {}  # path -> where it redirects to
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                site.hits[path] = site.hits.get(path, 0) + 1
                if path in site.redirects:
                    self.send_response(302)
                    self.send_header("Location", site.redirects[path])
                    self.end_headers()
                    return
                if path == "/slow":
                    time.sleep(3)
                if path.startswith("/stream/"):
                    self.send_response(200)
                    self.end_headers()
                    # the client stops reading at its limit
                    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                        self.wfile.write(b"#" * int(path.rsplit("/", 1)[1]))
                    return
                body = site.documents.get(path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def put(self, path: str, content: str | bytes | dict[str, Any]) -> str:
        if isinstance(content, dict):
            content = yaml.safe_dump(content, sort_keys=False)
        self.documents[path] = content.encode() if isinstance(content, str) else content
        return self.url + path

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def site() -> Iterator[Site]:
    served = Site()
    yield served
    served.close()


def closed_port() -> int:
    """A loopback port nothing listens on."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    server.server_close()
    return port


# --- jobs and components -----------------------------------------------------------------------


def job(
    *,
    prerequisites: list[str] | None = None,
    docker_image: str = "bb",
    extras: dict[str, Any] | None = None,
    local: tuple[dict[str, Any], ...] = (),
    **role: Any,
) -> JobSpec:
    """A one-role v2 job on the busybox image; `local` adds prerequisites of its own."""
    doc: dict[str, Any] = {
        "protocolVersion": 2,
        "name": "refjob",
        "type": "job",
        "prerequisites": [{"name": "bb", "type": "dockerimage", "uri": IMAGE}, *local],
        "taskRoles": {
            "main": {
                "dockerImage": docker_image,
                "resourcePerInstance": {"cpu": 1, "memoryMB": 128, "gpu": 0},
                "commands": ["ls"],
                **({"prerequisites": prerequisites} if prerequisites is not None else {}),
                **role,
            }
        },
    }
    if extras:
        doc["extras"] = extras
    result = parse_job(json.dumps(doc))
    assert result.spec is not None, result.errors
    return result.spec


def cmd(name: str, *commands: str, variables: tuple[str, ...] = (), **more: Any) -> dict:
    """A plugin component whose taskStarts callback runs `commands`."""
    doc: dict[str, Any] = {
        "name": name,
        "plugin": "com.microsoft.pai.runtimeplugin.cmd",
        "callbacks": [{"event": "taskStarts", "commands": list(commands)}],
        **more,
    }
    if variables:
        doc["template_variables"] = [{"name": v} for v in variables]
    return doc


def resolve(
    spec: JobSpec,
    market: Marketplace | None = None,
    viewer: Viewer = ANN,
    **options: Any,
) -> ResolvedReferences:
    resolver = ReferenceResolver(
        market or Marketplace(),
        market or Marketplace(),
        fetch=options.pop("fetch", FetchSettings(timeout=5, policy=LOOPBACK)),
        **options,
    )
    return resolver.resolve(spec, viewer)


def errors_of(result: ResolvedReferences) -> list[tuple[str, str]]:
    return [(i.path, i.code) for i in result.errors]


def only_error(result: ResolvedReferences) -> str:
    assert result.spec is None
    assert len(result.errors) == 1, result.errors
    return result.errors[0].message


# --- require chains ----------------------------------------------------------------------------


def test_a_require_chain_of_three_items_with_template_variables_is_resolved() -> None:
    market = Marketplace()
    market.publish(cmd("greeter", "echo {{ greeting }} > /tmp/greeting", variables=("greeting",)))
    market.publish(
        cmd(
            "tools",
            "echo installing for {{ who }}",
            variables=("who",),
            require=[
                {
                    "name": "marketplace://name/greeter",
                    "template_variables": {"greeting": "hello {{ who }}"},
                }
            ],
        )
    )
    dataset = market.publish(
        {
            **cmd(
                "digits",
                "mkdir -p {{ dataPath }}",
                variables=("dataPath", "owner"),
                require=[
                    {
                        "name": "marketplace://name/tools",
                        "template_variables": {"who": "{{ owner }}"},
                    }
                ],
            ),
            "type": "data",
            "uri": ["http://data.example/digits-{{ owner }}.csv"],
        }
    )
    spec = job(
        prerequisites=["digits"],
        extras={
            "reference_prerequisites": [
                {
                    "name": "digits",
                    "require": [
                        {
                            "name": f"marketplace://prerequisites/itemId/{dataset}",
                            "template_variables": {"dataPath": "/data/digits", "owner": "ann"},
                        }
                    ],
                }
            ]
        },
    )
    result = resolve(spec, market)
    assert result.issues == []
    resolved = result.spec
    assert resolved is not None
    role = resolved.task_roles[0]
    assert role.prerequisites == ["greeter", "tools", "digits"]  # what is required comes first
    by_name = {p.name: p for p in resolved.prerequisites}
    assert by_name["greeter"].callbacks[0].commands == ["echo hello ann > /tmp/greeting"]
    assert by_name["tools"].callbacks[0].commands == ["echo installing for ann"]
    assert by_name["digits"].callbacks[0].commands == ["mkdir -p /data/digits"]
    assert by_name["digits"].uri == ["http://data.example/digits-ann.csv"]
    assert [r.name for r in by_name["digits"].require] == ["tools"]
    assert [r.name for r in by_name["tools"].require] == ["greeter"]
    assert all(by_name[n].template_variables == [] for n in ("greeter", "tools", "digits"))
    # each resolved prerequisite says where it came from
    assert result.origins["digits"].item_id == dataset
    assert result.origins["digits"].template_variables == {
        "dataPath": "/data/digits",
        "owner": "ann",
    }
    assert result.origins["greeter"].reference == "marketplace://name/greeter"
    assert result.item_ids == frozenset(market.items)
    # self-contained: no reference is left, the v2 YAML reads back, and it launches in order
    assert "marketplace://" not in to_v2_yaml(resolved)
    assert "reference_prerequisites" not in resolved.extras
    again = parse_job(to_v2_yaml(resolved))
    assert again.spec is not None, again.errors
    hooks = launch_request(resolved, job_id="j").role("main").hooks
    assert hooks.on_start == [
        "echo hello ann > /tmp/greeting",
        "echo installing for ann",
        "mkdir -p /data/digits",
    ]


def test_seed_004_mnist_with_extras_reference_prerequisites() -> None:
    market = Marketplace()
    market.publish(cmd("install_wget", "apt update", "apt install -y wget"))
    market.publish(
        {
            "name": "mnist",
            "require": [{"name": "marketplace://name/install_wget"}],
            "plugin": "cmd",
            "plugin_params": {
                "callbacks": [
                    {
                        "event": "taskStarts",
                        "commands": [
                            "mkdir -p {{ dataPath }}",
                            "wget http://1.2.3.4/mnist.zip -O {{ dataPath }}",
                        ],
                    }
                ]
            },
            "template_variables": [{"name": "dataPath"}],
        }
    )
    spec = job(
        prerequisites=["mnist"],
        extras={
            "reference_prerequisites": [
                {
                    "name": "mnist",
                    "require": [
                        {
                            "name": "marketplace://name/mnist",
                            "template_variables": {"dataPath": "/dataset/mnist"},
                        }
                    ],
                }
            ]
        },
    )
    result = resolve(spec, market, BOB)
    assert result.errors == []
    resolved = result.spec
    assert resolved is not None
    assert resolved.task_roles[0].prerequisites == ["install_wget", "mnist"]
    hooks = launch_request(resolved, job_id="j").role("main").hooks
    assert hooks.on_start == [
        "apt update",
        "apt install -y wget",
        "mkdir -p /dataset/mnist",
        "wget http://1.2.3.4/mnist.zip -O /dataset/mnist",
    ]


def test_the_same_item_with_other_values_is_a_second_prerequisite() -> None:
    market = Marketplace()
    market.publish(cmd("hook", "sleep {{ min }}m", variables=("min",)))
    two = {
        "name": "marketplace://name/hook",
        "template_variables": {"min": 2},
    }
    spec = job(
        prerequisites=["short", "long", "short"],
        extras={
            "reference_prerequisites": [
                {"name": "short", "require": [two]},
                {"name": "long", "require": [{**two, "template_variables": {"min": 30}}]},
            ]
        },
    )
    resolved = resolve(spec, market).spec
    assert resolved is not None
    assert resolved.task_roles[0].prerequisites == ["hook", "hook-2"]
    commands = {p.name: p.callbacks[0].commands for p in resolved.prerequisites if p.callbacks}
    assert commands == {"hook": ["sleep 2m"], "hook-2": ["sleep 30m"]}


def test_a_require_cycle_is_an_error_that_names_the_chain() -> None:
    market = Marketplace()
    market.publish(cmd("alpha", "true", require=["marketplace://name/beta"]))
    market.publish(cmd("beta", "true", require=["marketplace://name/gamma"]))
    market.publish(cmd("gamma", "true", require=["marketplace://prerequisites/itemId/1"]))
    result = resolve(job(prerequisites=["bb", "marketplace://name/alpha"]), market)
    assert errors_of(result) == [("taskRoles.main.prerequisites[1]", "require-cycle")]
    assert "alpha@1 -> beta@1 -> gamma@1 -> alpha@1" in only_error(result)


def test_a_cycle_among_the_jobs_own_prerequisites_is_found_too() -> None:
    spec = job(
        prerequisites=["one"],
        local=(cmd("one", "true", require=["two"]), cmd("two", "true", require=["one"])),
    )
    result = resolve(spec)
    assert errors_of(result) == [("prerequisites[2].require[0]", "require-cycle")]
    assert "one -> two -> one" in only_error(result)


def test_a_missing_template_variable_names_the_variable_and_the_item() -> None:
    market = Marketplace()
    market.publish(cmd("debug_hook", "sleep {{ min }}m", variables=("min",)))
    market.publish(cmd("wrapper", "true", require=["marketplace://name/debug_hook"]))
    given_nothing = job(
        prerequisites=["debug"],
        extras={
            "reference_prerequisites": [
                {"name": "debug", "require": [{"name": "marketplace://name/debug_hook"}]}
            ]
        },
    )
    result = resolve(given_nothing, market)
    assert errors_of(result) == [
        ("extras.reference_prerequisites[0].require[0]", "missing-variable")
    ]
    assert "debug_hook@1 needs a value for template variable 'min'" in only_error(result)

    deeper = resolve(job(prerequisites=["marketplace://name/wrapper"]), market)
    assert errors_of(deeper) == [("taskRoles.main.prerequisites[0]", "missing-variable")]
    assert only_error(deeper).startswith("in wrapper@1: debug_hook@1 needs a value")

    direct = resolve(job(prerequisites=["marketplace://name/debug_hook"]), market)
    assert "extras.reference_prerequisites" in only_error(direct)  # where values can be given


def test_depth_and_size_limits() -> None:
    market = Marketplace()
    for n in range(6):
        market.publish(cmd(f"level{n}", "true", require=[f"marketplace://name/level{n + 1}"]))
    market.publish(cmd("level6", "true"))
    spec = job(prerequisites=["marketplace://name/level0"])
    assert resolve(spec, market).errors == []
    too_deep = resolve(spec, market, limits=ReferenceLimits(max_depth=4))
    assert errors_of(too_deep) == [("taskRoles.main.prerequisites[0]", "too-deep")]
    assert "level0@1 -> level1@1 -> level2@1 -> level3@1" in only_error(too_deep)
    too_many = resolve(spec, market, limits=ReferenceLimits(max_components=3))
    assert errors_of(too_many) == [("taskRoles.main.prerequisites[0]", "too-many")]
    too_big = resolve(spec, market, limits=ReferenceLimits(max_total_bytes=500))
    assert errors_of(too_big) == [("taskRoles.main.prerequisites[0]", "too-large")]


# --- what an item may be and who may see it ----------------------------------------------------


def test_a_private_item_reads_as_not_found_to_others() -> None:
    market = Marketplace()
    private = market.publish(cmd("secret_setup", "true"), owner="ann", visibility="private")
    shared = market.publish(
        cmd("team_setup", "true"), owner="ann", visibility="groups", groups=frozenset({"research"})
    )
    spec = job(prerequisites=[f"marketplace://prerequisites/itemId/{private}"])
    assert resolve(spec, market, ANN).errors == []
    hidden = resolve(spec, market, BOB)
    assert errors_of(hidden) == [("taskRoles.main.prerequisites[0]", "not-found")]
    missing = resolve(job(prerequisites=["marketplace://prerequisites/itemId/99"]), market, BOB)
    # a hidden item and one that does not exist read the same: nothing about it leaks
    assert only_error(hidden).replace(private, "#") == only_error(missing).replace("99", "#")
    assert only_error(hidden).startswith("prerequisite not found")

    by_group = job(prerequisites=[f"marketplace://prerequisites/itemId/{shared}"])
    assert resolve(by_group, market, CARL).errors == []
    assert errors_of(resolve(by_group, market, BOB)) == [
        ("taskRoles.main.prerequisites[0]", "not-found")
    ]
    # and a public item cannot pull a private one in for someone who may not see it
    market.publish(cmd("public_wrapper", "true", require=["marketplace://name/secret_setup"]))
    wrapped = resolve(job(prerequisites=["marketplace://name/public_wrapper"]), market, BOB)
    assert errors_of(wrapped) == [("taskRoles.main.prerequisites[0]", "not-found")]


def test_versions_can_be_pinned_or_the_latest_taken() -> None:
    market = Marketplace()
    market.publish(cmd("setup", "echo one"), version="1")
    market.publish(cmd("setup", "echo two"), version="2")

    def commands(reference: str) -> list[str]:
        resolved = resolve(job(prerequisites=[reference]), market).spec
        assert resolved is not None
        return resolved.prerequisite("setup").callbacks[0].commands  # type: ignore[union-attr]

    assert commands("marketplace://name/setup") == ["echo two"]
    assert commands("marketplace://name/setup@1") == ["echo one"]
    gone = resolve(job(prerequisites=["marketplace://name/setup@3"]), market)
    assert "version '3'" in only_error(gone)


def test_a_job_template_or_the_wrong_type_where_a_component_is_expected() -> None:
    market = Marketplace()
    template = to_v2_yaml(job())
    template_id = market.publish(template, kind=ItemKind.JOB_TEMPLATE)
    data_id = market.publish({"name": "digits", "type": "data", "uri": ["http://x/d.csv"]})
    image_id = market.publish({"name": "tf", "type": "dockerimage", "uri": "tensorflow:2"})
    as_component = resolve(
        job(prerequisites=[f"marketplace://prerequisites/itemId/{template_id}"]), market
    )
    assert errors_of(as_component) == [("taskRoles.main.prerequisites[0]", "not-a-component")]
    assert "job template" in only_error(as_component)
    as_image = resolve(job(docker_image=f"marketplace://prerequisites/itemId/{data_id}"), market)
    assert errors_of(as_image) == [("taskRoles.main.dockerImage", "wrong-type")]
    assert "needs a dockerimage component" in only_error(as_image)
    image = resolve(job(docker_image=f"marketplace://prerequisites/itemId/{image_id}"), market)
    assert image.spec is not None
    assert launch_request(image.spec, job_id="j").role("main").image == "tensorflow:2"


# --- storages ----------------------------------------------------------------------------------


def test_required_storages_need_a_definition_and_a_permission(tmp_path: Path) -> None:
    market = Marketplace()
    market.define("confignfs", str(tmp_path), StorageMode.READ_ONLY, groups=("research",))
    market.publish(
        {
            **cmd("imagenet", "ls /mnt/confignfs_pvc/imagenet"),
            "type": "data",
            "requireStorages": [{"name": "confignfs", "mountPath": "/mnt/confignfs_pvc"}],
        }
    )
    market.publish({**cmd("undefined_store", "true"), "requireStorages": [{"name": "nowhere"}]})
    spec = job(prerequisites=["marketplace://name/imagenet"])
    denied = resolve(spec, market, BOB)
    assert errors_of(denied) == [("taskRoles.main.prerequisites[0]", "storage-forbidden")]
    assert "no permission to use storage 'confignfs'" in only_error(denied)

    allowed = resolve(spec, market, CARL)
    assert allowed.spec is not None
    mount = StorageMount(
        name="confignfs", source=str(tmp_path), read_only=True, mount_path="/mnt/confignfs_pvc"
    )
    assert allowed.spec.task_roles[0].storages == [mount]
    storages = launch_request(allowed.spec, job_id="j").role("main").storages
    assert [(s.source, s.target, s.read_only) for s in storages] == [
        (str(tmp_path), "/mnt/confignfs_pvc", True)
    ]

    undefined = resolve(job(prerequisites=["marketplace://name/undefined_store"]), market, CARL)
    assert errors_of(undefined) == [("taskRoles.main.prerequisites[0]", "storage-undefined")]
    assert "'nowhere'" in only_error(undefined)


def test_a_pvc_storage_item_mounts_its_claim_for_every_instance_of_the_roles_using_it() -> None:
    """Seed 004's `plugin: pvc_storage` item, required by a cmd item with its mountPath filled
    in: checked like requireStorages, and on Kubernetes the claim of that name."""
    market = Marketplace()
    market.define("confignfs", "confignfs", StorageMode.READ_ONLY, volume=True, users=("carl",))
    market.publish(
        {
            "name": "confignfs_pvc",
            "plugin": "pvc_storage",
            "plugin_params": {"name": "confignfs", "mountPath": "{{ mountPath }}"},
            "template_variables": [{"name": "mountPath"}],
        }
    )
    market.publish(
        {
            **cmd("imagenet", "cp -r /mnt/confignfs_pvc/imagenet/* /dataset/imagenet"),
            "require": [
                {
                    "name": "marketplace://name/confignfs_pvc",
                    "template_variables": {"mountPath": "/mnt/confignfs_pvc"},
                }
            ],
        }
    )
    spec = job(prerequisites=["marketplace://name/imagenet"], instances=3)
    denied = resolve(spec, market, BOB)
    assert errors_of(denied) == [("taskRoles.main.prerequisites[0]", "storage-forbidden")]
    assert only_error(denied).startswith(
        "no permission to use storage 'confignfs' (prerequisite 'confignfs_pvc')"
    )

    allowed = resolve(spec, market, CARL)
    assert allowed.spec is not None
    request = launch_request(allowed.spec, job_id="imagenet-0a1b2c3d")
    objects = AttemptBuilder(request, KubernetesSettings(namespace="jobs"), "jobs").objects()
    assert len(objects.pods) == 3
    for pod in objects.pods:
        claims = {
            v["name"]: v["persistentVolumeClaim"]
            for v in pod["spec"]["volumes"]
            if "persistentVolumeClaim" in v
        }
        assert [c["claimName"] for c in claims.values()] == ["confignfs"]
        (volume,) = claims
        (container,) = pod["spec"]["containers"]
        mounted = [m for m in container["volumeMounts"] if m["name"] == volume]
        assert mounted == [{"name": volume, "mountPath": "/mnt/confignfs_pvc", "readOnly": True}]


def test_required_storages_are_merged_with_the_jobs_own(tmp_path: Path) -> None:
    market = Marketplace()
    market.define("shared", str(tmp_path), StorageMode.READ_WRITE, users=("bob",))
    market.define("other", str(tmp_path / "o"), StorageMode.READ_ONLY, users=("bob",))
    market.publish({**cmd("uses_shared", "true"), "requireStorages": [{"name": "shared"}]})
    market.publish(
        {
            **cmd("clashes", "true"),
            "requireStorages": [{"name": "other", "mountPath": "/mnt/shared"}],
        }
    )
    spec = job(
        prerequisites=["marketplace://name/uses_shared"],
        extras={"storages": [{"name": "shared"}, {"name": "other", "mountPath": "/data/other"}]},
    )
    resolved = resolve(spec, market, BOB).spec
    assert resolved is not None
    assert [(s.name, s.mount_path, s.read_only) for s in resolved.task_roles[0].storages] == [
        ("shared", "/mnt/shared", False),
        ("other", "/data/other", True),
    ]
    clash = resolve(
        job(
            prerequisites=["marketplace://name/uses_shared", "marketplace://name/clashes"],
            extras={"storages": [{"name": "shared"}]},
        ),
        market,
        BOB,
    )
    assert [c for _, c in errors_of(clash)] == ["storage-conflict"]


def test_the_simulator_refuses_a_storage_it_cannot_mount(tmp_path: Path) -> None:
    check_storage("here", str(tmp_path), volume=False)
    check_storage("vol", "paigraph-data_1", volume=True)
    with pytest.raises(UnservableMaterial, match="does not exist on this machine"):
        check_storage("gone", str(tmp_path / "missing"), volume=False)
    with pytest.raises(UnservableMaterial, match="not an absolute host path"):
        check_storage("relative", "data/shared", volume=False)
    with pytest.raises(UnservableMaterial, match="not a Docker volume name"):
        check_storage("vol", "../etc", volume=True)


# --- http(s) components ------------------------------------------------------------------------


def test_an_http_component_served_locally_is_resolved_and_fetched_once(site: Site) -> None:
    hook = site.put(
        "/components/hook.yaml", cmd("debug_hook", "echo from {{ where }}", variables=("where",))
    )
    image = site.put(
        "/components/image.yaml", {"name": "busy", "type": "dockerimage", "uri": IMAGE}
    )
    spec = job(
        docker_image=image,
        prerequisites=["hook_here", "hook_there"],
        extras={
            "reference_prerequisites": [
                {
                    "name": "hook_here",
                    "require": [{"name": hook, "template_variables": {"where": "here"}}],
                },
                {
                    "name": "hook_there",
                    "require": [{"name": hook, "template_variables": {"where": "there"}}],
                },
            ]
        },
    )
    result = resolve(spec)
    assert result.errors == []
    resolved = result.spec
    assert resolved is not None
    assert resolved.task_roles[0].docker_image == "busy"
    assert resolved.task_roles[0].prerequisites == ["debug_hook", "debug_hook-2"]
    assert result.origins["debug_hook"].url == hook
    assert result.item_ids == frozenset()
    assert site.hits == {"/components/hook.yaml": 1, "/components/image.yaml": 1}
    assert launch_request(resolved, job_id="j").role("main").hooks.on_start == [
        "echo from here",
        "echo from there",
    ]


def test_a_broken_remote_component_is_an_error_with_its_reason(site: Site) -> None:
    broken = site.put("/broken.yaml", "name: x\nplugin: cmd\ncallbacks: [\n")
    a_job = site.put("/job.yaml", to_v2_yaml(job()))
    invalid = site.put("/invalid.yaml", {"name": "bad name!", "type": "data"})
    result = resolve(job(prerequisites=[broken, a_job, invalid]))
    assert errors_of(result) == [
        ("taskRoles.main.prerequisites[0]", "invalid-component"),
        ("taskRoles.main.prerequisites[1]", "not-a-component"),
        ("taskRoles.main.prerequisites[2]", "invalid-component"),
    ]
    messages = [e.message for e in result.errors]
    assert broken in messages[0] and "YAML" in messages[0]
    assert "is a job, not a component" in messages[1]
    assert "name" in messages[2]


def test_unreachable_urls_and_marketplaces_have_their_own_errors(site: Site) -> None:
    port = closed_port()
    gone = f"http://127.0.0.1:{port}/hook.yaml"
    result = resolve(job(prerequisites=[gone, site.url + "/missing.yaml"]))
    assert errors_of(result) == [
        ("taskRoles.main.prerequisites[0]", "download-failed"),
        ("taskRoles.main.prerequisites[1]", "download-failed"),
    ]
    assert result.errors[0].message.startswith("the prerequisite cannot be downloaded from")
    assert "HTTP 404" in result.errors[1].message

    site.put(
        "/items/7",
        json.dumps(
            {
                "id": "7",
                "name": "hook",
                "version": "1",
                "kind": "plugin",
                "content": yaml.safe_dump(cmd("hook", "true")),
            }
        ),
    )
    spec = job(prerequisites=["marketplace://prerequisites/itemId/7"])
    remote = ReferenceResolver(
        HttpMarketplace(site.url), fetch=FetchSettings(timeout=5, policy=LOOPBACK)
    )
    assert remote.resolve(spec, BOB).errors == []
    down = ReferenceResolver(HttpMarketplace(f"http://127.0.0.1:{port}"))
    unreachable = down.resolve(spec, BOB)
    assert errors_of(unreachable) == [
        ("taskRoles.main.prerequisites[0]", "marketplace-unreachable")
    ]
    assert "the marketplace cannot be reached" in only_error(unreachable)


def test_downloads_have_a_size_limit_and_a_deadline(site: Site) -> None:
    big = site.put("/big.yaml", cmd("big", "echo " + "x" * 5000))
    small = FetchSettings(max_bytes=2000, timeout=5, policy=LOOPBACK)
    result = resolve(job(prerequisites=[big, site.url + "/stream/100000"]), fetch=small)
    assert errors_of(result) == [
        ("taskRoles.main.prerequisites[0]", "too-large"),
        ("taskRoles.main.prerequisites[1]", "too-large"),
    ]
    assert "over the limit of 2000 bytes" in result.errors[0].message
    started = time.monotonic()
    slow = resolve(
        job(prerequisites=[site.url + "/slow"]), fetch=FetchSettings(timeout=0.5, policy=LOOPBACK)
    )
    assert time.monotonic() - started < 2.5
    assert errors_of(slow) == [("taskRoles.main.prerequisites[0]", "download-failed")]
    assert "within 0.5 s" in only_error(slow)


def test_remote_references_can_be_refused_by_a_setting(site: Site) -> None:
    hook = site.put("/hook.yaml", cmd("hook", "true"))
    refused = resolve(job(prerequisites=[hook]), fetch=FetchSettings(allow_remote=False))
    assert errors_of(refused) == [("taskRoles.main.prerequisites[0]", "remote-refused")]
    assert site.hits == {}
    assert FetchSettings.from_env({ALLOW_ENV: "false"}).allow_remote is False
    assert FetchSettings.from_env({}).allow_remote is True
    with pytest.raises(SettingsError, match=ALLOW_ENV):
        FetchSettings.from_env({ALLOW_ENV: "maybe"})


def test_references_to_loopback_are_refused_alike_whether_a_port_is_open_or_not(
    site: Site,
) -> None:
    hook = site.put("/hook.yaml", cmd("hook", "true"))
    closed = f"http://127.0.0.1:{closed_port()}/hook.yaml"
    result = resolve(job(prerequisites=[hook, closed]), fetch=FetchSettings(timeout=5))
    assert errors_of(result) == [
        ("taskRoles.main.prerequisites[0]", "address-refused"),
        ("taskRoles.main.prerequisites[1]", "address-refused"),
    ]
    first, second = (e.message for e in result.errors)
    assert first.startswith(f"the component at {hook} is not fetched: 127.0.0.1 is a loopback")
    assert f"adding 127.0.0.1 to {ALLOWED_NETWORKS_ENV}" in first
    assert second == first.replace(hook, closed)  # nothing tells an open port from a closed one
    assert site.hits == {}


def test_a_redirect_to_loopback_and_a_name_for_loopback_are_refused(site: Site) -> None:
    hook = site.put("/hook.yaml", cmd("hook", "true"))
    site.redirects["/moved.yaml"] = hook
    by_name = hook.replace("127.0.0.1", "localhost")
    allow_name = FetchSettings(timeout=5, policy=FetchPolicy.parse("localhost"))
    redirected = resolve(job(prerequisites=[by_name.replace("hook", "moved")]), fetch=allow_name)
    assert errors_of(redirected) == [("taskRoles.main.prerequisites[0]", "address-refused")]
    assert "127.0.0.1 is a loopback address" in only_error(redirected)
    assert site.hits == {"/moved.yaml": 1}  # the allowed host answered; its redirect was refused

    named = resolve(job(prerequisites=[by_name]), fetch=FetchSettings(timeout=5))
    assert "host localhost resolves to" in only_error(named)
    assert "a loopback address" in only_error(named)
    assert site.hits == {"/moved.yaml": 1}


def test_the_allow_list_comes_from_the_environment() -> None:
    settings = FetchSettings.from_env({ALLOWED_NETWORKS_ENV: "10.0.0.0/8, minio.lan"})
    assert settings.policy == FetchPolicy.parse(["10.0.0.0/8", "minio.lan"])
    assert FetchSettings.from_env({}).policy == FetchPolicy()
    with pytest.raises(SettingsError, match=f"{ALLOWED_NETWORKS_ENV}: '10.1.0.0/8' is not a"):
        FetchSettings.from_env({ALLOWED_NETWORKS_ENV: "10.1.0.0/8"})


# --- end to end on the Docker simulator --------------------------------------------------------


@pytest.fixture
def volume(owner: str) -> Iterator[str]:
    name = f"paigraph-test-{uuid.uuid4().hex[:8]}"
    yield name
    remove_leftovers(owner)  # no container may hold the volume any more
    with contextlib.suppress(docker.errors.NotFound):
        docker.from_env().volumes.get(name).remove(force=True)


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_dataset_from_a_marketplace_item_is_read_by_a_job_on_the_simulator(
    db_url: str, tmp_path: Path, site: Site, owner: str, volume: str
) -> None:
    site.put("/datasets/digits.csv", "digit,count\n7,42\n")
    reference_data = tmp_path / "reference"
    reference_data.mkdir()
    (reference_data / "README").write_text("read-only reference data\n")
    results = tmp_path / "results"
    results.mkdir()
    results.chmod(0o777)  # the container's user writes here
    market = Marketplace()
    market.define("refdata", str(reference_data), StorageMode.READ_ONLY, users=("bob",))
    market.define("results", str(results), StorageMode.READ_WRITE, users=("bob",))
    market.define("scratch", volume, StorageMode.READ_WRITE, volume=True, users=("bob",))
    item = market.publish(
        {
            "name": "digits",
            "type": "data",
            "uri": [site.url + "/datasets/digits.csv"],
            "requireStorages": [{"name": "refdata", "mountPath": "/mnt/reference"}],
        },
        owner="ann",
    )
    doc = yaml.safe_load(to_v2_yaml(job()))
    doc["prerequisites"].append({"name": "results", "type": "output"})
    doc["extras"] = {"storages": [{"name": "scratch"}]}
    doc["taskRoles"]["main"].update(
        data=f"marketplace://prerequisites/itemId/{item}",
        output="results",
        commands=[
            "cat /work/digits/digits.csv",
            "cat /mnt/reference/README",
            "if touch /mnt/reference/x 2>/dev/null; then echo WRITABLE; exit 3; fi",
            "grep 7,42 /work/digits/digits.csv > /work/results/found.txt",
            "echo kept > /mnt/scratch/kept.txt",
        ],
    )
    store = open_store(db_url)
    bus = bus_for(db_url)
    service = JobService(
        store,
        DockerBackend(
            settings(tmp_path / "state", allowed_fetch_networks=["127.0.0.1"]), owner=owner
        ),
        bus,
        references=ReferenceResolver(
            market, market, fetch=FetchSettings(timeout=5, policy=LOOPBACK)
        ),
    )
    try:
        await service.start()
        bob = store.create_user("bob")[0]
        outcome = await service.submit(bob, yaml.safe_dump(doc), {})
        assert outcome.errors == [] and outcome.job is not None
        assert outcome.item_ids == frozenset({item})
        job_id = outcome.job.id
        found = await until_async(
            lambda: (job := store.get_job(job_id)).state.is_final and job,
            f"job {job_id} ended",
            120,
            0.3,
        )
        log = "".join([c.data async for c in service.logs(job_id, "main", 0)])
        assert found.state is JobState.SUCCEEDED, (found.state_reason, log)
        assert "7,42" in log and "read-only reference data" in log and "WRITABLE" not in log
        assert (results / "found.txt").read_text() == "7,42\n"
        assert site.hits["/datasets/digits.csv"] == 1
        kept = docker.from_env().volumes.get(volume)
        assert kept.attrs["Name"] == volume
        # the stored job keeps what it was resolved with: a restart mounts the same
        stored = store.job_specs([job_id])[job_id]
        assert {s.name for s in stored.task_roles[0].storages} == {"refdata", "results", "scratch"}
        assert stored.prerequisite("digits").origin.item_id == item  # type: ignore[union-attr]
    finally:
        await service.close()
        await bus.close()
        store.close()


RESOLVE = """
mutation($config: String!) { resolveJob(input: {config: $config}) {
  errors { path code message } job { taskRoles { prerequisites { name } } } } }
"""


@pytest.mark.docker
@pytest.mark.anyio
async def test_resolve_job_over_graphql_sees_the_marketplace_as_the_signed_in_user(
    db_url: str, tmp_path: Path, owner: str
) -> None:
    market = Marketplace()
    private = market.publish(cmd("ann_setup", "true"), owner="ann", visibility="private")
    config = to_v2_yaml(job(prerequisites=[f"marketplace://prerequisites/itemId/{private}"]))
    store = open_store(db_url)
    bus = bus_for(db_url)
    service = JobService(
        store,
        DockerBackend(settings(tmp_path / "state"), owner=owner),
        bus,
        references=ReferenceResolver(market, market),
    )
    try:
        ann = store.create_user("ann")[1]
        bob = store.create_user("bob")[1]
        async with serving(create_app(service)) as client:
            mine = (await data(client, RESOLVE, {"config": config}, token=ann))["resolveJob"]
            theirs = (await data(client, RESOLVE, {"config": config}, token=bob))["resolveJob"]
    finally:
        await bus.close()
        store.close()
    assert mine["errors"] == []
    assert mine["job"]["taskRoles"][0]["prerequisites"][-1] == {"name": "ann_setup"}
    assert theirs["job"] is None
    assert [(e["path"], e["code"]) for e in theirs["errors"]] == [
        (["taskRoles", "main", "prerequisites", "0"], "not-found")
    ]


@pytest.mark.docker
@pytest.mark.anyio
async def test_resolve_job_over_graphql_gives_no_port_scan_of_loopback(
    db_url: str, tmp_path: Path, owner: str, site: Site
) -> None:
    hook = site.put("/hook.yaml", cmd("hook", "true"))
    closed = f"http://127.0.0.1:{closed_port()}/hook.yaml"
    config = to_v2_yaml(job(prerequisites=[hook, closed]))
    store = open_store(db_url)
    bus = bus_for(db_url)
    service = JobService(
        store,
        DockerBackend(settings(tmp_path / "state"), owner=owner),
        bus,
        references=ReferenceResolver(fetch=FetchSettings(timeout=5)),
    )
    try:
        ann = store.create_user("ann")[1]
        async with serving(create_app(service)) as client:
            answer = (await data(client, RESOLVE, {"config": config}, token=ann))["resolveJob"]
    finally:
        await bus.close()
        store.close()
    assert answer["job"] is None
    open_port, closed_port_ = answer["errors"]
    assert [open_port["code"], closed_port_["code"]] == ["address-refused"] * 2
    assert open_port["path"] == ["taskRoles", "main", "prerequisites", "0"]
    assert "127.0.0.1 is a loopback address" in open_port["message"]
    assert closed_port_["message"] == open_port["message"].replace(hook, closed)
    assert site.hits == {}
