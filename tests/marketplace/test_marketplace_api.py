"""The marketplace through GraphQL: publishing (from content and from a job), versions, the
linked types a template shows, visibility, stars, deleting, using items (and submitting from
them on the Docker simulator), and the whole corpus imported, listed, searched and paged."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from backends.docker import DockerBackend
from server.api.ids import expect_global_id, global_id
from server.app.asgi import create_app, marketplace_references
from server.client.market_import import content_version, derived_version
from server.events import bus_for
from server.jobs.service import JobService
from server.store import Store, open_store
from tests.api_support import data, gql, live_server, runtime, serving
from tests.marketplace_support import accepted_corpus_items, data_item, image_item, template
from tests.simulated import settings
from tests.store_support import submit
from tests.waiting import until_async

pytestmark = pytest.mark.anyio

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
ITEM = """
  id name version latestVersion type summary description tags visibility groups stars submits
  viewerHasStarred viewerCanChange owner { name }
"""
PUBLISH = f"""
mutation($input: PublishMarketplaceItemInput!) {{
  publishMarketplaceItem(input: $input) {{
    outcome item {{ {ITEM} }} errors {{ path code message }}
  }}
}}"""
GET = f"""
query($id: ID!, $version: String) {{
  marketplaceItem(id: $id, version: $version) {{
    {ITEM} content templateVariables parameters
    versions {{ version latest content }}
    taskRoles {{
      name instanceCount commands instances {{ index }}
      resourcePerInstance {{ cpu memoryMB gpu }}
      dockerImage {{ name type uri }}
      prerequisites {{ name type uri reference marketplaceItem {{ id name version }} }}
    }}
    prerequisites {{ name type uri }}
  }}
}}"""
LIST = """
query($first: Int, $after: String, $filter: MarketplaceItemFilter, $sort: MarketplaceItemSort!) {
  marketplaceItems(first: $first, after: $after, filter: $filter, sort: $sort) {
    edges { cursor node { id name type summary description stars submits } }
    pageInfo { hasNextPage endCursor }
  }
}"""
USE = """
mutation($input: UseMarketplaceItemInput!) {
  useMarketplaceItem(input: $input) {
    config job { id name state } item { id submits } errors { path code message }
  }
}"""
STAR = f"""
mutation($id: ID!, $star: Boolean!) {{
  starMarketplaceItem(input: {{id: $id, star: $star}}) {{ item {{ {ITEM} }} errors {{ code }} }}
}}"""
UPDATE = f"""
mutation($input: UpdateMarketplaceItemInput!) {{
  updateMarketplaceItem(input: $input) {{ item {{ {ITEM} }} errors {{ path code message }} }}
}}"""
DELETE = """
mutation($id: ID!) {
  deleteMarketplaceItem(input: {id: $id}) { item { name } errors { path code message } }
}"""


class Api:
    """An in-process server without a backend, its store, and a few users' tokens."""

    def __init__(self, client: httpx.AsyncClient, store: Store) -> None:
        self.client = client
        self.store = store
        self.tokens: dict[str, str] = {}
        self.service: JobService | None = None  # when it runs jobs

    def user(self, name: str, *vcs: str, admin: bool = False) -> str:
        found, token = self.store.create_user(name, admin=admin)
        for vc in vcs:
            self.store.add_membership(found.id, vc)
        self.tokens[name] = token
        return token

    async def publish(self, who: str, **values: Any) -> dict[str, Any]:
        answer = await data(self.client, PUBLISH, {"input": values}, token=self.tokens[who])
        return answer["publishMarketplaceItem"]

    async def published(self, who: str, content: str, **values: Any) -> dict[str, Any]:
        payload = await self.publish(who, content=content, **values)
        assert payload["errors"] == [], payload["errors"]
        return payload["item"]

    async def get(self, who: str, item_id: str, version: str | None = None) -> Any:
        variables = {"id": item_id, "version": version}
        return (await data(self.client, GET, variables, token=self.tokens[who]))["marketplaceItem"]

    async def listed(
        self, who: str, *, sort: str = "RECENT", first: int = 100, **where: Any
    ) -> list[dict[str, Any]]:
        """Every item of the list, page after page."""
        items: list[dict[str, Any]] = []
        after = None
        while True:
            variables = {"first": first, "after": after, "filter": where or None, "sort": sort}
            found = (await data(self.client, LIST, variables, token=self.tokens[who]))[
                "marketplaceItems"
            ]
            items += [edge["node"] for edge in found["edges"]]
            if not found["pageInfo"]["hasNextPage"]:
                return items
            after = found["pageInfo"]["endCursor"]

    async def use(self, who: str, **values: Any) -> dict[str, Any]:
        answer = await data(self.client, USE, {"input": values}, token=self.tokens[who])
        return answer["useMarketplaceItem"]


@asynccontextmanager
async def api(db_url: str) -> AsyncIterator[Api]:
    app = create_app(db_url=db_url, backend=None)
    async with serving(app) as client:
        yield Api(client, runtime(app).store)


# --- publishing, versions, what an item shows ---------------------------------------------------


async def test_a_published_template_shows_its_versions_task_roles_and_prerequisites(
    db_url: str,
) -> None:
    async with api(db_url) as server:
        server.user("ann")
        server.user("bob")
        text = template(
            "trainer",
            parameters={"epochs": 2},
            commands=["train --epochs <% $parameters.epochs %>"],
            description="Trains a model.\n\nSee **README**.",
        )
        first = await server.published("ann", text, tags=["ml"], summary="A trainer")
        assert first["type"] == "JOB_TEMPLATE"
        assert (first["name"], first["version"], first["summary"]) == ("trainer", "1", "A trainer")
        assert first["description"] == "Trains a model.\n\nSee **README**."
        assert first["owner"] == {"name": "ann"} and first["viewerCanChange"] is True
        again = await server.publish("ann", content=text)
        assert again["outcome"] == "UNCHANGED"
        second = await server.publish("ann", content=text.replace("train ", "train2 "))
        assert (second["outcome"], second["item"]["version"]) == ("NEW_VERSION", "2")
        assert second["item"]["id"] == first["id"]

        shown = await server.get("bob", first["id"])
        assert shown["viewerCanChange"] is False
        assert [v["version"] for v in shown["versions"]] == ["2", "1"]
        assert [v["latest"] for v in shown["versions"]] == [True, False]
        assert shown["parameters"] == {"epochs": 2}
        (role,) = shown["taskRoles"]
        assert role["name"] == "main" and role["instanceCount"] == 1
        assert role["commands"] == ["train2 --epochs 2"]  # rendered with the defaults
        assert role["instances"] == []
        assert role["resourcePerInstance"] == {"cpu": 1, "memoryMB": 128, "gpu": 0}
        assert role["dockerImage"] == {
            "name": "bb",
            "type": "DOCKERIMAGE",
            "uri": ["paigraph/busybox:test"],
        }
        assert shown["prerequisites"] == [role["dockerImage"]]
        old = await server.get("bob", first["id"], "1")
        assert (old["version"], old["latestVersion"]) == ("1", "2")
        assert old["content"] == text
        assert old["taskRoles"][0]["commands"] == ["train --epochs 2"]
        missing = await gql(
            server.client, GET, {"id": first["id"], "version": "9"}, token=server.tokens["bob"]
        )
        assert missing["errors"][0]["message"].startswith("version: item 'trainer' has no version")

        node = await data(
            server.client,
            "query($id: ID!) { node(id: $id) { __typename ... on MarketplaceItem { name } } }",
            {"id": first["id"]},
            token=server.tokens["bob"],
        )
        assert node["node"] == {"__typename": "MarketplaceItem", "name": "trainer"}


async def test_refused_content_and_bad_inputs_come_back_as_errors_with_paths(db_url: str) -> None:
    async with api(db_url) as server:
        server.user("ann")
        server.user("bob")
        broken = await server.publish(
            "ann", content=template("x").replace("memoryMB: 128", "memoryMB: 10")
        )
        assert broken["item"] is None and broken["outcome"] is None
        assert broken["errors"][0]["path"] == [
            "content",
            "taskRoles",
            "main",
            "resourcePerInstance",
            "memoryMB",
        ]
        both = await server.publish("ann", content=template(), jobId="x")
        assert [(e["path"], e["code"]) for e in both["errors"]] == [(["content"], "required")]
        bad_tags = await server.publish("ann", content=template(), tags=["", "x" * 70])
        assert [e["path"] for e in bad_tags["errors"]] == [["tags", "0"], ["tags", "1"]]
        bad_group = await server.publish("ann", content=template(), groups=["no spaces"])
        assert [e["path"] for e in bad_group["errors"]] == [["groups", "0"]]
        await server.published("ann", template("taken"))
        taken = await server.publish("bob", content=template("taken", commands=["echo"]))
        assert [e["code"] for e in taken["errors"]] == ["name-taken"]
        job_id = global_id("Job", "nope")
        answer = await gql(server.client, GET, {"id": job_id}, token=server.tokens["ann"])
        assert "expected the ID of a MarketplaceItem" in answer["errors"][0]["message"]
        bad_cursor = await gql(
            server.client, LIST, {"after": "nonsense", "sort": "RECENT"}, token=server.tokens["ann"]
        )
        assert bad_cursor["errors"][0]["message"].startswith("after:")


async def test_a_job_is_published_as_a_template_by_its_owner(db_url: str) -> None:
    async with api(db_url) as server:
        server.user("ann")
        server.user("bob")
        ann = server.store.user_named("ann")
        assert ann is not None
        job, _ = submit(server.store, ann.id, "tf_dist", T0)
        refused = await server.publish("bob", jobId=global_id("Job", job.id))
        assert [(e["path"], e["code"]) for e in refused["errors"]] == [(["jobId"], "forbidden")]
        payload = await server.publish("ann", jobId=global_id("Job", job.id), tags=["from-job"])
        assert payload["errors"] == [] and payload["outcome"] == "NEW_ITEM"
        item = await server.get("bob", payload["item"]["id"])
        assert (item["name"], item["type"], item["tags"]) == (
            "tf_dist",
            "JOB_TEMPLATE",
            ["from-job"],
        )
        assert item["content"] == server.store.job_config(job.id)
        assert [r["name"] for r in item["taskRoles"]] == ["ps", "worker"]
        worker = item["taskRoles"][1]
        assert [p["name"] for p in worker["prerequisites"]] == ["tf_image", "cifar", "bench"]


async def test_a_name_given_at_publishing_is_written_into_the_content_in_its_dialect(
    db_url: str,
) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples" / "dialects"
    async with api(db_url) as server:
        server.user("ann")
        v2 = await server.published("ann", template("as-written"), name="renamed-v2")
        assert v2["name"] == "renamed-v2"
        content = yaml.safe_load((await server.get("ann", v2["id"]))["content"])
        assert content["name"] == "renamed-v2"
        v1 = await server.published(
            "ann", (examples / "counting.v1.json").read_text(), name="renamed-v1"
        )
        content = (await server.get("ann", v1["id"]))["content"]
        assert v1["name"] == "renamed-v1" and '"jobName": "renamed-v1"' in content
        job = yaml.safe_load((examples / "counting.draft.yaml").read_text())
        sectioned = {"prerequisites": job.pop("prerequisites"), "job": job}
        draft = await server.published("ann", yaml.safe_dump(sectioned), name="renamed-draft")
        content = yaml.safe_load((await server.get("ann", draft["id"]))["content"])
        assert draft["name"] == content["job"]["name"] == "renamed-draft"
        assert "name" not in content
        component = await server.published("ann", data_item("shelf"), name="renamed-data")
        assert (component["name"], component["type"]) == ("renamed-data", "DATA")
        again = template("renamed-v2", commands=["echo again"])
        same = await server.publish("ann", content=again, name="renamed-v2")
        assert (same["outcome"], same["item"]["id"]) == ("NEW_VERSION", v2["id"])

        bad = await server.publish("ann", content=template("fine"), name="no spaces allowed")
        assert [e["path"] for e in bad["errors"]] == [["name"]]
        assert "no spaces allowed" in bad["errors"][0]["message"]
        blank = await server.publish("ann", content=template("fine"), name="  ")
        assert [(e["path"], e["code"]) for e in blank["errors"]] == [(["name"], "required")]

        ann = server.store.user_named("ann")
        assert ann is not None
        job, _ = submit(server.store, ann.id, "tf_dist", T0)
        shared = await server.publish("ann", jobId=global_id("Job", job.id), name="tf-shared")
        assert shared["errors"] == [] and shared["item"]["name"] == "tf-shared"


# --- visibility, stars, changes ----------------------------------------------------------------


async def test_visibility_applies_to_get_list_use_star_and_delete(db_url: str) -> None:
    async with api(db_url) as server:
        for name in ("ann", "bob", "cat"):
            server.user(name)
        server.user("dan", "research")
        server.user("root", admin=True)
        private = await server.published("ann", data_item("mine"), visibility="PRIVATE")
        shared = await server.published("ann", data_item("team"), groups=["research"])
        public = await server.published("ann", data_item("open"))
        assert (shared["visibility"], shared["groups"]) == ("GROUPS", ["research"])

        async def names(who: str) -> set[str]:
            return {i["name"] for i in await server.listed(who)}

        assert await names("bob") == {"open"}
        assert await names("dan") == {"open", "team"}
        assert await names("root") == await names("ann") == {"mine", "team", "open"}
        assert await server.get("bob", private["id"]) is None
        assert (await server.get("dan", shared["id"]))["name"] == "team"
        used = await server.use("bob", id=private["id"])
        assert [e["code"] for e in used["errors"]] == ["not-found"]
        starred = await data(
            server.client, STAR, {"id": private["id"], "star": True}, token=server.tokens["bob"]
        )
        assert starred["starMarketplaceItem"]["errors"] == [{"code": "not-found"}]

        deleted = await data(
            server.client, DELETE, {"id": public["id"]}, token=server.tokens["bob"]
        )
        assert [e["code"] for e in deleted["deleteMarketplaceItem"]["errors"]] == ["forbidden"]
        update = {"id": public["id"], "summary": "mine now"}
        changed = await data(server.client, UPDATE, {"input": update}, token=server.tokens["bob"])
        assert [e["code"] for e in changed["updateMarketplaceItem"]["errors"]] == ["forbidden"]
        update = {"id": private["id"], "visibility": "PUBLIC", "tags": ["now", "open"]}
        changed = await data(server.client, UPDATE, {"input": update}, token=server.tokens["ann"])
        item = changed["updateMarketplaceItem"]["item"]
        assert (item["visibility"], item["tags"]) == ("PUBLIC", ["now", "open"])
        assert await names("bob") == {"open", "mine"}
        new_version = {"id": private["id"], "content": data_item("other")}
        renamed = await data(
            server.client, UPDATE, {"input": new_version}, token=server.tokens["ann"]
        )
        assert [e["code"] for e in renamed["updateMarketplaceItem"]["errors"]] == ["name-mismatch"]
        new_version["content"] = data_item("mine", commands=["echo two"])
        changed = await data(
            server.client, UPDATE, {"input": new_version}, token=server.tokens["ann"]
        )
        assert changed["updateMarketplaceItem"]["item"]["version"] == "2"

        deleted = await data(
            server.client, DELETE, {"id": public["id"]}, token=server.tokens["root"]
        )
        assert deleted["deleteMarketplaceItem"] == {"item": {"name": "open"}, "errors": []}
        assert await server.get("ann", public["id"]) is None


async def test_stars_per_user_and_sorting_by_stars(db_url: str) -> None:
    async with api(db_url) as server:
        for name in ("ann", "bob", "cat"):
            server.user(name)
        quiet = await server.published("ann", template("quiet"))
        liked = await server.published("ann", template("liked"))

        async def star(who: str, item: dict[str, Any], value: bool = True) -> dict[str, Any]:
            answer = await data(
                server.client, STAR, {"id": item["id"], "star": value}, token=server.tokens[who]
            )
            return answer["starMarketplaceItem"]["item"]

        assert (await star("bob", liked))["stars"] == 1
        assert (await star("bob", liked))["stars"] == 1
        after = await star("cat", liked)
        assert (after["stars"], after["viewerHasStarred"]) == (2, True)
        assert (await star("ann", quiet))["stars"] == 1
        assert [i["name"] for i in await server.listed("ann", sort="STARS")] == ["liked", "quiet"]
        after = await star("bob", liked, False)
        assert (after["stars"], after["viewerHasStarred"]) == (1, False)
        assert (await server.get("cat", liked["id"]))["viewerHasStarred"] is True
        assert (await server.get("bob", liked["id"]))["viewerHasStarred"] is False


async def test_counts_tags_in_use_and_contributor_follow_what_the_viewer_may_see(
    db_url: str,
) -> None:
    async with api(db_url) as server:
        server.user("ann")
        server.user("bob")
        await server.published("ann", template("t1", contributor="Lab A"), tags=["GPU", "vision"])
        await server.published("ann", template("t2"), tags=["gpu"])
        await server.published("ann", data_item("d1"), tags=["gpu", "secret"], visibility="PRIVATE")
        await server.published("bob", data_item("d2"), tags=["text", "gpu"])
        query = """
        query($filter: MarketplaceItemFilter, $type: ItemType) {
          marketplaceItems(first: 1, filter: $filter) { totalCount edges { node { name } } }
          marketplaceTags(type: $type) { name items }
        }"""

        async def ask(who: str, **variables: Any) -> dict[str, Any]:
            return await data(server.client, query, variables, token=server.tokens[who])

        seen = await ask("bob")
        assert seen["marketplaceItems"]["totalCount"] == 3  # ann's private item is not counted
        assert len(seen["marketplaceItems"]["edges"]) == 1
        # most used first; spellings differing in case are one tag, spelt as most spell it
        assert seen["marketplaceTags"] == [
            {"name": "gpu", "items": 3},
            {"name": "text", "items": 1},
            {"name": "vision", "items": 1},
        ]
        own = await ask("ann", filter={"tag": "GPU"}, type="DATA")
        assert own["marketplaceItems"]["totalCount"] == 4
        assert own["marketplaceTags"] == [
            {"name": "gpu", "items": 2},
            {"name": "secret", "items": 1},
            {"name": "text", "items": 1},
        ]
        searched = await ask("bob", filter={"search": "T1"})
        assert searched["marketplaceItems"]["totalCount"] == 1

        (t1,) = await server.listed("bob", name="t1")
        (d2,) = await server.listed("bob", name="d2")
        made = "query($id: ID!) { marketplaceItem(id: $id) { contributor owner { name } } }"
        shown = await data(server.client, made, {"id": t1["id"]}, token=server.tokens["bob"])
        assert shown["marketplaceItem"] == {"contributor": "Lab A", "owner": {"name": "ann"}}
        shown = await data(server.client, made, {"id": d2["id"]}, token=server.tokens["bob"])
        assert shown["marketplaceItem"]["contributor"] is None


async def test_an_item_lists_the_items_it_requires_linked_when_the_viewer_may_see_them(
    db_url: str,
) -> None:
    async with api(db_url) as server:
        server.user("ann")
        server.user("bob")
        image = await server.published("ann", image_item("bbimg"))
        await server.published("ann", image_item("hidden"), visibility="PRIVATE")
        uses = yaml.safe_load(template("uses"))
        uses["prerequisites"].append(
            {"name": "prep", "type": "data", "uri": ["x"], "require": ["marketplace://name/hidden"]}
        )
        uses["taskRoles"]["main"]["dockerImage"] = "marketplace://name/bbimg"
        uses["taskRoles"]["main"]["prerequisites"] = ["https://example.org/c.yaml"]
        item = await server.published("ann", yaml.safe_dump(uses))
        query = """
        query($id: ID!) { marketplaceItem(id: $id) { requires { reference item { id name } } } }
        """

        async def requires(who: str) -> list[dict[str, Any]]:
            found = await data(server.client, query, {"id": item["id"]}, token=server.tokens[who])
            return found["marketplaceItem"]["requires"]

        bbimg = {
            "reference": "marketplace://name/bbimg",
            "item": {"id": image["id"], "name": "bbimg"},
        }
        https = {"reference": "https://example.org/c.yaml", "item": None}
        assert await requires("bob") == [
            bbimg,
            https,
            {"reference": "marketplace://name/hidden", "item": None},  # not bob's to see
        ]
        assert (await requires("ann"))[2]["item"]["name"] == "hidden"


async def test_use_gives_a_ready_config_or_says_what_is_missing(db_url: str) -> None:
    async with api(db_url) as server:
        server.user("ann")
        server.user("bob")
        mnist = await server.published("ann", data_item("mnist", variables=["dataPath"]))
        missing = await server.use("bob", id=mnist["id"])
        assert missing["config"] is None
        assert [(e["path"], e["code"]) for e in missing["errors"]] == [
            (["parameters", "dataPath"], "missing-variable")
        ]
        used = await server.use(
            "bob", id=mnist["id"], parameters={"dataPath": "/d"}, dockerImage="busybox"
        )
        doc = yaml.safe_load(used["config"])
        (reference,) = doc["extras"]["reference_prerequisites"]
        assert reference["require"] == [
            {
                "name": "marketplace://name/mnist",
                "template_variables": {"dataPath": "/d"},
            }
        ]
        trainer = await server.published("ann", template("t", parameters={"n": 1}))
        wrong = await server.use("bob", id=trainer["id"], dockerImage="busybox")
        assert [e["code"] for e in wrong["errors"]] == ["not-applicable"]
        not_object = await server.use("bob", id=trainer["id"], parameters=[1])
        assert [(e["path"], e["code"]) for e in not_object["errors"]] == [(["parameters"], "type")]
        filled = await server.use("bob", id=trainer["id"], parameters={"n": 5})
        assert yaml.safe_load(filled["config"])["parameters"] == {"n": 5}
        assert filled["job"] is None and filled["item"]["submits"] == 0


# --- the corpus ----------------------------------------------------------------------------------


@pytest.mark.shared("corpus")
async def test_the_corpus_is_imported_then_listed_searched_and_paged(db_url: str) -> None:
    accepted = accepted_corpus_items()
    assert len(accepted) > 100
    async with api(db_url) as server:
        server.user("ann")
        server.user("bob")
        for entry in accepted:
            content = entry.path.read_text(encoding="utf-8")
            payload = await server.publish("ann", content=content, tags=["corpus"])
            if [e["code"] for e in payload["errors"]] == ["version-exists"]:
                version = content_version(content)
                assert version is not None
                retry = derived_version(version, content)
                payload = await server.publish("ann", content=content, version=retry)
            assert payload["errors"] == [], (entry.path.name, payload["errors"])

        names = {entry.name for entry in accepted}
        everything = await server.listed("bob", first=7)
        assert sorted(i["name"] for i in everything) == sorted(names)  # each once, all of them
        kinds = {entry.name: entry.kind for entry in accepted}
        assert all(i["type"].lower() == kinds[i["name"]] for i in everything)
        stored: set[str] = set()
        for entry in accepted:  # every file is one of its item's versions, secrets masked
            item = next(i for i in everything if i["name"] == entry.name)
            found = await server.get("bob", item["id"])
            contents = {v["content"] for v in found["versions"]}
            assert entry.stored in contents, entry.path.name
            stored |= contents
        secret = "cGFzc3dvcmQ="  # a secret's value in two corpus files
        assert any(secret in e.path.read_text(encoding="utf-8") for e in accepted)
        assert not any(secret in text for text in stored)

        images = await server.listed("bob", type="DOCKERIMAGE")
        assert {i["name"] for i in images} == {e.name for e in accepted if e.kind == "dockerimage"}
        for word in ("cifar", "MNIST", "covid", "tensorflow"):
            found = {i["name"] for i in await server.listed("bob", first=10, search=word)}
            expected = {
                i["name"]
                for i in everything
                if any(
                    word.lower() in (i[f] or "").lower() for f in ("name", "summary", "description")
                )
            }
            assert found == expected and found, word
        assert len(await server.listed("bob", tag="CORPUS", first=50)) == len(names)
        assert await server.listed("bob", owner="bob") == []


# --- submitting from an item on the Docker simulator -------------------------------------------


@asynccontextmanager
async def with_backend(db_url: str, state_dir: Path, owner: str) -> AsyncIterator[Api]:
    """A real server on the Docker simulator whose jobs resolve marketplace references
    against its own marketplace, as `paigraph serve` builds it."""
    store = open_store(db_url)
    bus = bus_for(db_url)
    # the datasets' site listens on loopback
    backend = DockerBackend(settings(state_dir, allowed_fetch_networks=["127.0.0.1"]), owner=owner)
    service = JobService(store, backend, bus, references=marketplace_references(store))
    try:
        async with (
            live_server(create_app(service)) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as client,
        ):
            server = Api(client, store)
            server.service = service
            yield server
    finally:
        await bus.close()
        store.close()


async def final_state(server: Api, who: str, job_id: str) -> dict[str, Any]:
    query = """query($id: ID!) { job(id: $id) { state user { name } taskRoles { commands
      prerequisites { name type uri reference marketplaceItem { id name version } } } } }"""

    async def ended() -> dict[str, Any] | None:
        answer = await data(server.client, query, {"id": job_id}, token=server.tokens[who])
        return (
            answer["job"] if answer["job"]["state"] in ("SUCCEEDED", "FAILED", "STOPPED") else None
        )

    return await until_async(ended, f"job {job_id} ending", 120)


async def log_of(server: Api, job_id: str, role: str) -> str:
    assert server.service is not None
    key = expect_global_id(job_id, "Job")
    return "".join([chunk.data async for chunk in server.service.logs(key, role, 0)])


@pytest.mark.docker
async def test_submitting_from_an_item_runs_the_job_and_counts_the_submit(
    db_url: str, tmp_path: Path, owner: str
) -> None:
    async with with_backend(db_url, tmp_path / "state", owner) as server:
        server.user("ann")
        server.user("bob")
        item = await server.published(
            "ann",
            template(
                "greeter",
                parameters={"who": "world"},
                commands=["echo hello <% $parameters.who %>"],
            ),
        )
        used = await server.use("bob", id=item["id"], parameters={"who": "bob"}, submit=True)
        assert used["errors"] == [] and used["job"]["name"] == "greeter"
        assert used["item"]["submits"] == 1
        job = await final_state(server, "bob", used["job"]["id"])
        assert (job["state"], job["user"]["name"]) == ("SUCCEEDED", "bob")
        assert job["taskRoles"][0]["commands"] == ["echo hello bob"]
        dry = await server.use("bob", id=item["id"])
        assert dry["job"] is None and dry["item"]["submits"] == 1  # using without submit: no count
        again = await server.use("ann", id=item["id"], submit=True)
        assert again["errors"] == [] and again["item"]["submits"] == 2
        shown = await server.listed("bob", sort="SUBMITS")
        assert [(i["name"], i["submits"]) for i in shown] == [("greeter", 2)]

        # a config used on a page (useMarketplaceItem without submit), then submitted as a job:
        # the item it was made from counts, an item hidden from the viewer or a bogus id not
        secret = await server.published("ann", template("hidden"), visibility="PRIVATE")
        edited = dry["config"].replace("greeter", "greeter-edited")
        made = await data(
            server.client,
            SUBMIT_FROM,
            {"config": edited, "from": [item["id"], secret["id"], "not-an-id"]},
            token=server.tokens["bob"],
        )
        assert made["submitJob"]["errors"] == [] and made["submitJob"]["job"] is not None
        counted = await server.listed("ann", sort="SUBMITS")
        assert {i["name"]: i["submits"] for i in counted} == {"greeter": 3, "hidden": 0}

        # naming items the job does not use counts nothing, however often: a job of other
        # commands (in the same image) named as made from the template and the image item
        image = await server.published("ann", image_item("bb-image"))
        for n in range(3):
            unrelated = template(f"unrelated{n}", commands=["echo something else"])
            named = await data(
                server.client,
                SUBMIT_FROM,
                {"config": unrelated, "from": [item["id"]]},
                token=server.tokens["bob"],
            )
            assert named["submitJob"]["errors"] == [], named
        counted = await server.listed("ann", sort="SUBMITS")
        assert {i["name"]: i["submits"] for i in counted}["greeter"] == 3
        # while the image item is really in it (the image the job runs in): it counts
        ran_in = await data(
            server.client,
            SUBMIT_FROM,
            {"config": template("in-the-image"), "from": [image["id"]]},
            token=server.tokens["bob"],
        )
        assert ran_in["submitJob"]["errors"] == []
        counted = await server.listed("ann", sort="SUBMITS")
        assert {i["name"]: i["submits"] for i in counted}["bb-image"] == 1


SUBMIT_FROM = """
mutation($config: String!, $from: [ID!]) {
  submitJob(input: {config: $config, fromItems: $from}) { job { id } errors { path message } }
}"""

SUBMIT = """
mutation($config: String!) {
  submitJob(input: {config: $config}) { job { id } errors { path code message } }
}"""


@pytest.fixture
def site(tmp_path: Path) -> Iterator[str]:
    """A local HTTP server with a dataset; the simulator downloads from it on the host."""
    root = tmp_path / "site" / "datasets"
    root.mkdir(parents=True)
    (root / "digits.csv").write_text("digit,count\n7,42\n")
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(root.parent))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.docker
async def test_a_data_item_published_by_one_user_is_read_by_another_users_job(
    db_url: str, tmp_path: Path, owner: str, site: str
) -> None:
    dataset = yaml.safe_dump(
        {
            "name": "digits",
            "type": "data",
            "description": "Counts of handwritten digits.",
            "uri": [f"{site}/datasets/digits.csv"],
        }
    )
    async with with_backend(db_url, tmp_path / "state", owner) as server:
        server.user("ann")
        server.user("bob")
        item = await server.published("ann", dataset)
        reference = f"marketplace://prerequisites/itemId/{item['id']}"

        # "use" on the marketplace page: an empty job with the dataset, run as it is
        used = await server.use(
            "bob", id=item["id"], dockerImage="paigraph/busybox:test", submit=True
        )
        assert used["errors"] == [], used["errors"]
        assert yaml.safe_load(used["config"])["taskRoles"]["taskrole"]["data"] == reference
        job = await final_state(server, "bob", used["job"]["id"])
        assert job["state"] == "SUCCEEDED", await log_of(server, used["job"]["id"], "taskrole")
        assert "digits.csv" in await log_of(server, used["job"]["id"], "taskrole")
        assert used["item"]["submits"] == 1  # the item used is also the one referenced: once

        # bob's own job that reads the dataset through the reference
        doc = yaml.safe_load(used["config"])
        doc["name"] = "count_sevens"
        doc["taskRoles"]["taskrole"]["commands"] = [
            "grep '^7,' /work/digits/digits.csv",
            'test "$(cut -d, -f2 /work/digits/digits.csv | tail -n 1)" = 42',
        ]
        answer = await data(
            server.client, SUBMIT, {"config": yaml.safe_dump(doc)}, token=server.tokens["bob"]
        )
        submitted = answer["submitJob"]
        assert submitted["errors"] == [], submitted["errors"]
        job = await final_state(server, "bob", submitted["job"]["id"])
        log = await log_of(server, submitted["job"]["id"], "taskrole")
        assert job["state"] == "SUCCEEDED", log
        assert "7,42" in log
        (role,) = job["taskRoles"]
        digits = next(p for p in role["prerequisites"] if p["name"] == "digits")
        assert digits["type"] == "DATA" and digits["uri"] == [f"{site}/datasets/digits.csv"]
        assert digits["reference"] == reference
        assert digits["marketplaceItem"] == {"id": item["id"], "name": "digits", "version": "1"}

        # once ann keeps it to herself, bob's reference finds nothing
        hide = {"id": item["id"], "visibility": "PRIVATE"}
        await data(server.client, UPDATE, {"input": hide}, token=server.tokens["ann"])
        doc["name"] = "count_again"
        answer = await data(
            server.client, SUBMIT, {"config": yaml.safe_dump(doc)}, token=server.tokens["bob"]
        )
        refused = answer["submitJob"]
        assert refused["job"] is None
        assert [(e["path"], e["code"]) for e in refused["errors"]] == [
            (["taskRoles", "taskrole", "data"], "not-found")
        ]


async def test_json_values_orjson_cannot_encode_still_come_back_exactly(db_url: str) -> None:
    """Responses are encoded with orjson, which refuses integers beyond 64 bits; a template's
    parameters may hold one, and the answer must still carry it, digit for digit."""
    async with api(db_url) as server:
        server.user("ann")
        huge = 2**70 + 1
        text = template("big", parameters={"seed": huge, "greeting": "grüße ✓"})
        item = await server.published("ann", text)
        shown = await server.get("ann", item["id"])
        assert shown["parameters"] == {"seed": huge, "greeting": "grüße ✓"}
