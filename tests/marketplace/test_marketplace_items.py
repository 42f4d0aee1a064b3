"""Marketplace items on real SQLite and PostgreSQL databases: publishing and versions, what
the protocol engine refuses, visibility, stars, deleting, using items, publishing a job, lists
(filters, sorting, paging), the lookup that reference resolution reads, and storages."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from server.marketplace.items import api_id
from server.marketplace.lookup import StorageMode, Viewer
from server.marketplace.service import ItemFields, ItemOutcome, MarketplaceService
from server.marketplace.store_lookup import StoreItemLookup, StoreStorageAccess, viewer_for
from server.protocol import parse_job
from server.shapes.item_kind import ItemKind
from server.shapes.marketplace_values import (
    ItemCursor,
    ItemFilter,
    ItemSort,
    MarketplaceItem,
    StorageExists,
    Visibility,
)
from server.shapes.store_errors import InvalidValue
from server.shapes.values import User
from server.store import Store
from tests.marketplace_support import data_item, image_item, template
from tests.store_support import submit

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def market(store: Store) -> MarketplaceService:
    return MarketplaceService(store)


def users(store: Store, *names: str, admin: bool = False) -> list[User]:
    return [store.create_user(name, admin=admin)[0] for name in names]


def published(
    market: MarketplaceService, user: User, content: str, **fields: Any
) -> MarketplaceItem:
    outcome = market.publish(user, content, ItemFields(**fields))
    assert outcome.errors == [], outcome.errors
    assert outcome.item is not None
    return outcome.item


# --- publishing and versions -------------------------------------------------------------------


def test_publishing_reads_kind_name_version_and_description_from_the_content(
    store: Store, market: MarketplaceService
) -> None:
    (ann,) = users(store, "ann")
    text = template("cifar", version="1.2", description="Train on CIFAR-10.\nMore words here.")
    item = published(market, ann, text, tags=["vision", "Vision", " cifar "])
    assert (item.name, item.kind, item.version, item.owner) == (
        "cifar",
        ItemKind.JOB_TEMPLATE,
        "1.2",
        "ann",
    )
    assert item.summary == "Train on CIFAR-10."
    assert item.description == "Train on CIFAR-10.\nMore words here."
    assert item.tags == ("vision", "cifar")  # trimmed, duplicates (any case) dropped
    assert item.visibility is Visibility.PUBLIC
    assert (item.stars, item.submits) == (0, 0)
    assert store.item_version(item.key) is not None
    assert store.item_version(item.key).content == text

    kinds = {
        "mnist": (data_item("mnist"), ItemKind.DATA),
        "busybox": (image_item("busybox"), ItemKind.DOCKERIMAGE),
        "bench": (yaml.safe_dump({"name": "bench", "type": "script", "uri": "x/y"}), "script"),
        "models": (yaml.safe_dump({"name": "models", "type": "output", "uri": "/o"}), "output"),
        "nfs": (yaml.safe_dump({"name": "nfs", "type": "storage", "uri": ["/s"]}), "storage"),
        "install_wget": (
            yaml.safe_dump(
                {
                    "name": "install_wget",
                    "plugin": "cmd",
                    "callbacks": [{"event": "taskStarts", "commands": ["apt install -y wget"]}],
                }
            ),
            "plugin",
        ),
    }
    for name, (content, kind) in kinds.items():
        assert published(market, ann, content).kind == ItemKind(kind), name


def test_content_the_protocol_engine_refuses_is_not_published_and_errors_point_into_it(
    store: Store, market: MarketplaceService
) -> None:
    (ann,) = users(store, "ann")
    broken = template("bad").replace("cpu: 1", "cpu: 0")
    outcome = market.publish(ann, broken, ItemFields())
    assert outcome.item is None
    assert [e.path_parts() for e in outcome.errors] == [
        ["content", "taskRoles", "main", "resourcePerInstance", "cpu"]
    ]
    assert "cpu" in outcome.errors[0].message
    outcome = market.publish(ann, "name: x\nfoo: [1, 2\n", ItemFields())
    assert outcome.item is None and outcome.errors[0].path_parts()[0] == "content"
    outcome = market.publish(ann, template("v", version="1 0"), ItemFields())
    assert [(e.path_parts(), e.code) for e in outcome.errors] == [
        (["content", "version"], "pattern")
    ]
    assert store.list_items(market.reader(ann)).items == []


SEED_PVC_ITEM = """\
name: confignfs_pvc
plugin: pvc_storage
plugin_params:
  name: confignfs
  mountPath: {{ mountPath }}
template_variables:
  - name: mountPath
"""


def test_an_items_placeholders_are_template_syntax_and_its_text_is_kept_as_written(
    store: Store, market: MarketplaceService
) -> None:
    (ann,) = users(store, "ann")
    item = published(market, ann, SEED_PVC_ITEM)
    assert item.kind is ItemKind.PLUGIN
    assert store.item_version(item.key).content == SEED_PVC_ITEM

    # a declared default is what publishing checks the item with
    with_default = SEED_PVC_ITEM.replace(
        "  - name: mountPath", "  - name: mountPath\n    default: mnt/relative"
    )
    outcome = market.publish(ann, with_default.replace("confignfs_pvc", "pvc2"), ItemFields())
    assert outcome.item is None
    assert [(e.path_parts(), e.code) for e in outcome.errors] == [
        (["content", "plugin_params", "mountPath"], "path")
    ]
    assert "mountPath='mnt/relative'" in outcome.errors[0].message
    good = with_default.replace("mnt/relative", "/mnt/confignfs").replace("confignfs_pvc", "pvc3")
    assert published(market, ann, good).name == "pvc3"

    # YAML that is wrong with its placeholders swapped out still is, and the error says to quote
    broken = SEED_PVC_ITEM.replace("  name: confignfs\n", "  name: nfs: {{ mountPath }}\n")
    outcome = market.publish(ann, broken.replace("confignfs_pvc", "pvc4"), ItemFields())
    assert outcome.item is None
    assert outcome.errors[0].code == "yaml-syntax"
    assert 'put it in quotes: name: "nfs: {{ mountPath }}"' in outcome.errors[0].message


def test_a_new_version_keeps_the_old_ones_and_references_pin_one_or_take_the_latest(
    store: Store, market: MarketplaceService
) -> None:
    ann, bob = users(store, "ann", "bob")
    first = published(market, ann, data_item("mnist", commands=["echo v1"]))
    assert first.version == "1"
    second = published(market, ann, data_item("mnist", commands=["echo v2"]))
    assert (second.key, second.version) == (first.key, "2")
    third = published(market, ann, data_item("mnist", commands=["echo v3"], version="3.0-rc"))
    assert third.version == "3.0-rc"
    assert [v.version for v in store.item_versions([first.key])[first.key]] == ["3.0-rc", "2", "1"]

    lookup = StoreItemLookup(store)
    viewer = viewer_for(store, bob)
    assert "echo v1" in lookup.by_name("mnist", "1", viewer).content
    latest = lookup.by_name("mnist", None, viewer)
    assert latest is not None and latest.version == "3.0-rc" and "echo v3" in latest.content
    by_id = lookup.by_id(api_id(first.key), viewer)
    assert by_id is not None and (by_id.id, by_id.version) == (api_id(first.key), "3.0-rc")
    assert lookup.by_id(first.key, viewer) == by_id  # the bare key works too
    assert lookup.by_name("mnist", "9", viewer) is None
    assert lookup.by_id("Sm9iOnNvbWVqb2I", viewer) is None  # the ID of a job, not of an item

    # the same content again changes nothing; other content under a taken version is refused
    again = market.publish(
        ann, data_item("mnist", commands=["echo v3"], version="3.0-rc"), ItemFields()
    )
    assert again.unchanged and again.item is not None and again.item.version == "3.0-rc"
    clash = market.publish(ann, data_item("mnist", commands=["echo x"], version="2"), ItemFields())
    assert [(e.path_parts(), e.code) for e in clash.errors] == [(["version"], "version-exists")]
    # a template cannot become a new version of a data item
    kind = market.publish(ann, template("mnist"), ItemFields())
    assert [e.code for e in kind.errors] == ["kind-mismatch"]
    assert len(store.item_versions([first.key])[first.key]) == 3


def test_only_the_owner_or_an_admin_adds_versions_to_a_name(
    store: Store, market: MarketplaceService
) -> None:
    ann, bob = users(store, "ann", "bob")
    (root,) = users(store, "root", admin=True)
    item = published(market, ann, template("shared"))
    taken = market.publish(bob, template("shared", commands=["echo bob"]), ItemFields())
    assert [(e.path_parts(), e.code) for e in taken.errors] == [(["content", "name"], "name-taken")]
    by_admin = published(market, root, template("shared", commands=["echo fixed"]))
    assert (by_admin.key, by_admin.version, by_admin.owner) == (item.key, "2", "ann")


def test_concurrent_publishers_of_one_name_get_one_item_with_distinct_versions(
    store: Store, market: MarketplaceService
) -> None:
    (ann,) = users(store, "ann")
    results: list[ItemOutcome] = []

    def publish(n: int) -> None:
        results.append(market.publish(ann, template("race", commands=[f"echo {n}"]), ItemFields()))

    threads = [threading.Thread(target=publish, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(not r.errors for r in results)
    keys = {r.item.key for r in results}
    assert len(keys) == 1
    versions = [v.version for v in store.item_versions(keys)[keys.pop()]]
    assert sorted(versions, key=int) == ["1", "2", "3", "4", "5", "6"]


# --- visibility ------------------------------------------------------------------------------


def test_visibility_decides_who_lists_and_finds_an_item(
    store: Store, market: MarketplaceService
) -> None:
    ann, bob, cat = users(store, "ann", "bob", "cat")
    (root,) = users(store, "root", admin=True)
    store.add_membership(bob.id, "research")
    public = published(market, ann, data_item("open"))
    private = published(market, ann, data_item("mine"), visibility=Visibility.PRIVATE)
    shared = published(market, ann, data_item("team"), groups=["research"])
    assert shared.visibility is Visibility.GROUPS and shared.groups == ("research",)

    def listed(user: User) -> set[str]:
        return {i.name for i in store.list_items(market.reader(user)).items}

    assert listed(ann) == listed(root) == {"open", "mine", "team"}
    assert listed(bob) == {"open", "team"}
    assert listed(cat) == {"open"}

    lookup = StoreItemLookup(store)
    for user, visible in ((ann, 3), (root, 3), (bob, 2), (cat, 1)):
        viewer = viewer_for(store, user)
        found = [lookup.by_id(api_id(i.key), viewer) for i in (public, private, shared)]
        assert sum(f is not None for f in found) == visible, user.name
        assert (market.visible(user, private.key) is not None) == (visible == 3), user.name
    cat_viewer = viewer_for(store, cat)
    assert lookup.by_name("mine", None, cat_viewer) is None
    assert lookup.by_name("team", None, Viewer("cat", groups=frozenset({"research"}))) is not None
    assert market.use(cat, private.key).errors[0].code == "not-found"
    assert market.star(cat, shared.key, True).errors[0].code == "not-found"

    # making it public shows it to everyone; groups without GROUPS visibility are refused
    changed = market.update(ann, private.key, ItemFields(visibility=Visibility.PUBLIC))
    assert changed.errors == [] and listed(cat) == {"open", "mine"}
    refused = market.update(
        ann, public.key, ItemFields(visibility=Visibility.PRIVATE, groups=["research"])
    )
    assert [(e.path_parts(), e.code) for e in refused.errors] == [(["groups"], "conflict")]
    refused = market.update(ann, public.key, ItemFields(visibility=Visibility.GROUPS))
    assert [(e.path_parts(), e.code) for e in refused.errors] == [(["groups"], "required")]


# --- stars, submits, deleting ------------------------------------------------------------------


def test_stars_count_each_user_once_and_unstarring_takes_one_back(
    store: Store, market: MarketplaceService
) -> None:
    ann, bob = users(store, "ann", "bob")
    item = published(market, ann, template("popular"))
    assert market.star(bob, item.key, True).item.stars == 1
    assert market.star(bob, item.key, True).item.stars == 1
    assert market.star(ann, item.key, True).item.stars == 2
    assert store.starred_keys(bob.id, [item.key]) == {item.key}
    assert market.star(bob, item.key, False).item.stars == 1
    assert market.star(bob, item.key, False).item.stars == 1
    assert store.starred_keys(bob.id, [item.key]) == set()
    market.count_submit(item.key)
    market.count_submit(item.key)
    assert store.get_item(item.key).submits == 2


def test_only_the_owner_or_an_admin_deletes_an_item_and_its_versions_go_with_it(
    store: Store, market: MarketplaceService
) -> None:
    ann, bob = users(store, "ann", "bob")
    (root,) = users(store, "root", admin=True)
    mine = published(market, ann, template("mine"))
    published(market, ann, template("mine", commands=["echo 2"]))
    market.star(bob, mine.key, True)
    refused = market.delete(bob, mine.key)
    assert [(e.path_parts(), e.code) for e in refused.errors] == [(["id"], "forbidden")]
    assert store.get_item(mine.key) is not None
    assert market.delete(ann, mine.key).errors == []
    assert store.get_item(mine.key) is None
    assert store.item_versions([mine.key]) == {mine.key: []}
    assert market.delete(ann, mine.key).errors[0].code == "not-found"
    other = published(market, bob, template("bobs"))
    assert market.delete(root, other.key).errors == []
    assert store.item_named("bobs") is None
    # the name is free again
    assert published(market, ann, template("mine")).version == "1"


# --- using items -------------------------------------------------------------------------------


def test_using_a_template_fills_its_parameters_in_its_own_dialect(
    store: Store, market: MarketplaceService
) -> None:
    (ann,) = users(store, "ann")
    text = template(
        "train",
        parameters={"epochs": 1, "lr": 0.1},
        commands=["train --epochs <% $parameters.epochs %> --lr <% $parameters.lr %>"],
    )
    item = published(market, ann, text)
    assert market.use(ann, item.key).config == text  # nothing given: the template as published
    config = market.use(ann, item.key, parameters={"epochs": 20}).config
    assert config is not None
    spec = parse_job(config).spec
    assert spec is not None and spec.parameters == {"epochs": 20, "lr": 0.1}
    unknown = market.use(ann, item.key, parameters={"epoch": 3})
    assert unknown.config is None
    assert [(e.path_parts(), e.code) for e in unknown.errors] == [
        (["parameters", "epoch"], "unknown-parameter")
    ]
    assert "epochs, lr" in unknown.errors[0].message
    dotted = market.use(ann, item.key, parameters={"lr.max": 3})  # the name is one segment
    assert [e.path_parts() for e in dotted.errors] == [["parameters", "lr.max"]]

    draft = yaml.safe_dump(
        {
            "protocol_version": "v2",
            "name": "draft_tmpl",
            "type": "job",
            "parameters": {"model": "resnet"},
            "prerequisites": [{"name": "bb", "type": "dockerimage", "uri": "busybox"}],
            "tasks": [
                {
                    "role": "worker",
                    "dockerimage": "bb",
                    "resource": {"resourcePerInstance": {"cpu": 1, "memoryMB": 128, "gpu": 0}},
                    "command": ["train $$model$$"],
                }
            ],
        }
    )
    draft_item = published(market, ann, draft)
    config = market.use(ann, draft_item.key, parameters={"model": "vgg"}).config
    assert config is not None
    assert "protocol_version" in config  # still the draft dialect
    assert parse_job(config).spec.parameters == {"model": "vgg"}


def test_using_a_data_item_gives_an_empty_job_that_uses_it_as_seed_004_describes(
    store: Store, market: MarketplaceService
) -> None:
    ann, bob = users(store, "ann", "bob")
    plain = published(market, ann, data_item("covid"))
    config = market.use(bob, plain.key).config
    assert config is not None
    spec = parse_job(config).spec
    assert spec is not None
    (role,) = spec.task_roles
    assert role.prerequisites == [f"marketplace://prerequisites/itemId/{api_id(plain.key)}"]
    assert spec.prerequisite(role.docker_image).uri == ["ubuntu:22.04"]

    pinned = market.use(bob, plain.key, version="1", image="busybox:latest").config
    spec = parse_job(pinned or "").spec
    assert spec is not None
    assert spec.task_roles[0].prerequisites == ["marketplace://name/covid@1"]
    assert spec.prerequisite(spec.task_roles[0].docker_image).uri == ["busybox:latest"]
    assert market.use(bob, plain.key, version="7").errors[0].path_parts() == ["version"]

    with_vars = published(market, ann, data_item("mnist", variables=["dataPath"]))
    missing = market.use(bob, with_vars.key)
    assert [(e.path_parts(), e.code) for e in missing.errors] == [
        (["parameters", "dataPath"], "missing-variable")
    ]
    assert "'mnist'" in missing.errors[0].message
    config = market.use(bob, with_vars.key, parameters={"dataPath": "/dataset/mnist"}).config
    doc = yaml.safe_load(config or "")
    assert doc["taskRoles"]["taskrole"]["prerequisites"] == ["mnist"]
    assert doc["extras"]["reference_prerequisites"] == [
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
    assert parse_job(config or "").ok

    # a declared default is the value when none is given
    defaulted = data_item("digits", template_variables=[{"name": "dataPath", "default": "/d"}])
    with_default = published(market, ann, defaulted)
    config = market.use(bob, with_default.key).config
    (entry,) = yaml.safe_load(config or "")["extras"]["reference_prerequisites"]
    assert entry["require"][0]["template_variables"] == {"dataPath": "/d"}

    # a dataset with URIs is the role's data too: the backend puts it under /work/<name>/
    files = published(market, ann, yaml.safe_dump({"name": "files", "type": "data", "uri": ["u"]}))
    spec = parse_job(market.use(bob, files.key).config or "").spec
    assert spec is not None
    (role,) = spec.task_roles
    assert role.data == f"marketplace://prerequisites/itemId/{api_id(files.key)}"
    assert role.prerequisites == [] and role.commands == ["ls -la /work/files"]

    image = published(market, ann, image_item("bbox", "busybox:1.36"))
    config = market.use(bob, image.key).config
    spec = parse_job(config or "").spec
    assert spec is not None
    assert spec.prerequisite(spec.task_roles[0].docker_image).uri == ["busybox:1.36"]


def test_a_job_is_published_as_a_template_with_the_parameters_it_was_submitted_with(
    store: Store, market: MarketplaceService
) -> None:
    ann, bob = users(store, "ann", "bob")
    job, _ = submit(store, ann.id, "tf_dist", T0)  # tests.jobs' v2 job: parameters model, batch
    refused = market.publish_job(bob, job.id, ItemFields())
    assert [(e.path_parts(), e.code) for e in refused.errors] == [(["jobId"], "forbidden")]
    assert market.publish_job(ann, "nope", ItemFields()).errors[0].code == "not-found"
    outcome = market.publish_job(ann, job.id, ItemFields(tags=["from-a-job"]))
    assert outcome.errors == [] and outcome.item is not None
    assert (outcome.item.name, outcome.item.kind) == ("tf_dist", ItemKind.JOB_TEMPLATE)
    content = store.item_version(outcome.item.key).content
    assert content == store.job_config(job.id)
    assert parse_job(content).spec.parameters == {"model": "resnet20", "batch": 32}


# --- lists ---------------------------------------------------------------------------------------


def test_lists_filter_sort_and_page_with_cursors(store: Store, market: MarketplaceService) -> None:
    ann, bob, cat = users(store, "ann", "bob", "cat")
    names = [f"item{n:02d}" for n in range(12)]
    keys = {}
    for n, name in enumerate(names):
        owner = ann if n % 2 == 0 else bob
        content = (
            template(name, description=f"number {n}")
            if n % 3
            else data_item(name, description=f"Dataset NUMBER {n} of the CIFAR kind")
        )
        keys[name] = published(market, owner, content, tags=["even" if n % 2 == 0 else "odd"]).key
    for n, name in enumerate(names):
        for user in (ann, bob, cat)[: n % 4]:
            market.star(user, keys[name], True)
        for _ in range(n % 5):
            market.count_submit(keys[name])
    reader = market.reader(cat)

    def listed(where: ItemFilter, sort: ItemSort = ItemSort.RECENT) -> list[str]:
        return [i.name for i in store.list_items(reader, where, sort=sort, first=100).items]

    assert listed(ItemFilter()) == names[::-1]  # the most recent first
    assert listed(ItemFilter(kind=ItemKind.DATA)) == ["item09", "item06", "item03", "item00"]
    assert listed(ItemFilter(tag="ODD")) == [n for n in names[::-1] if int(n[-2:]) % 2]
    assert listed(ItemFilter(owner="bob")) == listed(ItemFilter(tag="odd"))
    assert listed(ItemFilter(search="cifar kind")) == ["item09", "item06", "item03", "item00"]
    assert listed(ItemFilter(search="ITEM1")) == ["item11", "item10"]
    assert listed(ItemFilter(search="_")) == []  # LIKE wildcards are plain text
    assert listed(ItemFilter(kind=ItemKind.DATA, owner="ann")) == ["item06", "item00"]
    by_stars = store.list_items(reader, sort=ItemSort.STARS, first=100).items
    assert [i.stars for i in by_stars] == sorted((i.stars for i in by_stars), reverse=True)
    by_submits = store.list_items(reader, sort=ItemSort.SUBMITS, first=100).items
    assert [i.submits for i in by_submits] == sorted((n % 5 for n in range(12)), reverse=True)

    for sort in ItemSort:
        seen: list[str] = []
        after = None
        while True:
            page = store.list_items(reader, sort=sort, first=5, after=after)
            seen += [i.name for i in page.items]
            if not page.has_next:
                break
            after = page.cursor_of(page.items[-1])
        assert seen == [i.name for i in store.list_items(reader, sort=sort, first=100).items]
        assert sorted(seen) == names
    with pytest.raises(InvalidValue, match="sorted by RECENT"):
        store.list_items(reader, sort=ItemSort.STARS, after=ItemCursor(ItemSort.RECENT, T0, "x"))
    with pytest.raises(InvalidValue, match="first"):
        store.list_items(reader, first=101)


# --- storages ------------------------------------------------------------------------------------


def test_storages_say_who_may_use_them(store: Store, tmp_path: Path) -> None:
    ann, bob, cat = users(store, "ann", "bob", "cat")
    (root,) = users(store, "root", admin=True)
    store.add_membership(cat.id, "research")
    store.add_storage("scratch", str(tmp_path), is_volume=False, read_only=False, users=["ann"])
    store.add_storage(
        "shared", "paigraph-shared", is_volume=True, read_only=True, groups=["research"]
    )
    store.add_storage("locked", str(tmp_path), is_volume=False, read_only=False)
    with pytest.raises(StorageExists):
        store.add_storage("locked", "/x", is_volume=False, read_only=False)
    access = StoreStorageAccess(store)
    found = access.storage("shared")
    assert found is not None
    assert (found.source, found.is_volume, found.mode) == (
        "paigraph-shared",
        True,
        StorageMode.READ_ONLY,
    )
    assert access.storage("scratch").mode is StorageMode.READ_WRITE
    assert access.storage("missing") is None
    allowed = {
        (user.name, name)
        for user in (ann, bob, cat, root)
        for name in ("scratch", "shared", "locked", "missing")
        if access.may_use(name, viewer_for(store, user))
    }
    assert allowed == {
        ("ann", "scratch"),
        ("cat", "shared"),
        ("root", "scratch"),
        ("root", "shared"),
        ("root", "locked"),
    }
    assert [s.name for s in store.list_storages()] == ["locked", "scratch", "shared"]
