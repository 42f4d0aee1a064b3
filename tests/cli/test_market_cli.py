"""`paigraph market ...` against real `paigraph serve` processes, and `paigraph storages` on
their databases: publishing, listing, showing, using (and submitting from) items, stars, and a
bulk import of the corpus."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from server.protocol import parse_document
from tests.corpus import CORPUS
from tests.marketplace_support import accepted_corpus_items, corpus_files, data_item, template
from tests.servers import Server, final_job, served
from tests.store_support import KINDS

pytestmark = pytest.mark.docker


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


def listed_names(stdout: str) -> list[str]:
    """The NAME column of `market list` (tab-separated when not on a terminal)."""
    header, *rows = stdout.splitlines()
    assert header.split("\t")[:2] == ["ID", "NAME"], header
    return [row.split("\t")[1] for row in rows]


def add_users(server: Server, *names: str) -> dict[str, str]:
    tokens = {}
    for name in names:
        added = server.paigraph("users", "add", name)
        assert added.returncode == 0, added.stderr
        tokens[name] = added.stdout.strip()
    return tokens


def test_storages_are_defined_on_the_database_with_who_may_use_them(
    kind: str, tmp_path: Path
) -> None:
    with served(kind, tmp_path) as server:
        add_users(server, "ann")
        added = server.paigraph(
            "storages", "add", "scratch", "--path", str(tmp_path), "--user", "ann", "--group", "ml"
        )
        assert added.returncode == 0, added.stderr
        assert added.stdout.strip() == (
            f"scratch: host directory {tmp_path} (read-write); may be used by user ann, group ml"
        )
        volume = server.paigraph("storages", "add", "shared", "--volume", "pg-data", "--read-only")
        assert volume.returncode == 0, volume.stderr
        assert "volume pg-data (read-only); may be used by admins only" in volume.stdout
        failures = {
            ("storages", "add", "x", "--path", "relative/dir"): (2, "--path must be absolute"),
            ("storages", "add", "x"): (2, "exactly one of --path and --volume"),
            ("storages", "add", "x", "--volume", "v", "--user", "zed"): (1, "no user named 'zed'"),
            ("storages", "add", "scratch", "--volume", "v"): (1, "exists already"),
            ("storages", "add", "bad name", "--volume", "v"): (2, "storage name 'bad name'"),
        }
        for args, (code, message) in failures.items():
            result = server.paigraph(*args)
            assert result.returncode == code, (args, result.stdout, result.stderr)
            assert message in result.stderr, (args, result.stderr)
        listed = server.paigraph("storages", "list")
        assert listed.returncode == 0, listed.stderr
        assert [line.split(":")[0] for line in listed.stdout.splitlines()] == ["scratch", "shared"]


def test_the_market_commands_publish_list_show_use_star_and_submit(
    kind: str, tmp_path: Path
) -> None:
    hello = tmp_path / "hello.yaml"
    hello.write_text(
        template(
            "hello",
            parameters={"who": "world"},
            commands=["echo hello <% $parameters.who %>"],
            description="Says hello.",
        )
    )
    mnist = tmp_path / "mnist.yaml"
    mnist.write_text(data_item("mnist", variables=["dataPath"], description="Digits, from LeCun"))
    broken = tmp_path / "broken.yaml"
    broken.write_text(template("broken").replace("cpu: 1", "cpu: -1"))
    with served(kind, tmp_path) as server:
        tokens = add_users(server, "ann", "bob")
        ann, bob = tokens["ann"], tokens["bob"]
        server.start()

        published = server.paigraph("market", "publish", str(hello), "--tag", "demo", token=ann)
        assert published.returncode == 0, published.stderr
        hello_id = published.stdout.strip()
        assert "published hello 1 (job_template)" in published.stderr
        published = server.paigraph(
            "market", "publish", str(mnist), "--visibility", "private", token=ann
        )
        assert published.returncode == 0, published.stderr
        again = server.paigraph("market", "publish", str(hello), token=ann)
        assert again.returncode == 0 and "already published: hello 1" in again.stderr
        refused = server.paigraph("market", "publish", str(broken), token=ann)
        assert refused.returncode == 1
        assert "content.taskRoles.main.resourcePerInstance.cpu" in refused.stderr
        taken = server.paigraph("market", "publish", str(hello), token=bob)
        assert taken.returncode == 1 and "name-taken" in taken.stderr

        listed = server.paigraph("market", "list", token=bob)
        assert listed.returncode == 0, listed.stderr
        assert listed_names(listed.stdout) == ["hello"]  # mnist is private to ann
        assert listed_names(server.paigraph("market", "list", token=ann).stdout) == [
            "mnist",
            "hello",
        ]
        mine = server.paigraph("market", "list", "--type", "data", token=ann)
        assert listed_names(mine.stdout) == ["mnist"]
        searched = server.paigraph("market", "list", "--search", "LECUN", token=ann)
        assert listed_names(searched.stdout) == ["mnist"]
        nothing = server.paigraph("market", "list", "--search", "nothing-like-this", token=ann)
        assert nothing.stdout.strip() == "no marketplace items match"
        bad = server.paigraph("market", "list", "--type", "movie", token=ann)
        assert bad.returncode == 2 and "--type must be one of" in bad.stderr

        shown = server.paigraph("market", "show", "hello", token=bob)
        assert shown.returncode == 0, shown.stderr
        assert (
            hello_id in shown.stdout and "owner" in shown.stdout and "Says hello." in shown.stdout
        )
        assert "echo hello <% $parameters.who %>" in shown.stdout
        content = server.paigraph("market", "show", hello_id, "--content", token=bob)
        assert content.stdout == hello.read_text()
        hidden = server.paigraph("market", "show", "mnist", token=bob)
        assert hidden.returncode == 1 and "no marketplace item 'mnist'" in hidden.stderr

        used = server.paigraph("market", "use", "hello", "--param", "who=bob", token=bob)
        assert used.returncode == 0, used.stderr
        assert yaml.safe_load(used.stdout)["parameters"] == {"who": "bob"}
        wrong = server.paigraph("market", "use", "hello", "--param", "whom=bob", token=bob)
        assert wrong.returncode == 1 and "parameters.whom" in wrong.stderr
        needs = server.paigraph("market", "use", "mnist", token=ann)
        assert needs.returncode == 1 and "dataPath" in needs.stderr
        dataset = server.paigraph("market", "use", "mnist", "-p", "dataPath=/d", token=ann)
        assert dataset.returncode == 0, dataset.stderr
        assert parse_document(dataset.stdout).ok

        starred = server.paigraph("market", "star", "hello", token=bob)
        assert starred.stdout.strip() == "starred hello: 1 star(s)"
        starred = server.paigraph("market", "star", hello_id, token=ann)
        assert starred.stdout.strip() == "starred hello: 2 star(s)"
        unstarred = server.paigraph("market", "star", "hello", "--unstar", token=bob)
        assert unstarred.stdout.strip() == "unstarred hello: 1 star(s)"

        submitted = server.paigraph(
            "market", "use", "hello", "--param", "who=cli", "--submit", token=bob
        )
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.strip()
        job = final_job(server.client(bob), job_id, timeout=90)
        assert job["state"] == "SUCCEEDED"
        logs = server.paigraph("logs", job_id, "main", "0", token=bob)
        assert "hello cli" in logs.stdout
        shown = server.paigraph("market", "show", "hello", token=bob)
        assert re.search(r"submits\s+1\b", shown.stdout), shown.stdout


ADDRESSED_ITEM = """\
# A data item whose server is given when it is published.
name: points
type: data
version: 1.0.0
uri:
  - http://{{ files }}/points.csv
template_variables:
  - name: files
  - name: label
"""


def test_import_fills_in_the_template_variables_it_is_given(tmp_path: Path) -> None:
    items = tmp_path / "items"
    items.mkdir()
    (items / "points.yaml").write_text(ADDRESSED_ITEM)
    with served("sqlite", tmp_path) as server:
        ann = add_users(server, "ann")["ann"]
        server.start()
        imported = server.paigraph(
            "market",
            "import",
            str(items),
            "--set",
            "files=10.1.2.3:9000",
            "--set",
            "typo=1",
            token=ann,
        )
        assert imported.returncode == 0, imported.stderr
        assert "1 published (1 new items" in imported.stdout
        assert "--set 'typo': no item in" in " ".join(imported.stderr.split())
        (edge,) = server.client(ann).execute(
            'query { marketplaceItems(filter: {name: "points"}) '
            "{ edges { node { content templateVariables } } } }"
        )["marketplaceItems"]["edges"]
        item = edge["node"]
        # `files` is filled in and no longer asked for; `label` is still the user's to give
        assert item["templateVariables"] == ["label"]
        assert yaml.safe_load(item["content"])["uri"] == ["http://10.1.2.3:9000/points.csv"]

        refused = server.paigraph("market", "import", str(items), "--set", "files", token=ann)
        assert refused.returncode == 2
        assert "--set takes NAME=VALUE, got 'files'" in refused.stderr


@pytest.mark.shared("corpus")
def test_importing_the_corpus_publishes_what_the_engine_accepts_and_reports_the_rest(
    kind: str, tmp_path: Path
) -> None:
    files = corpus_files()
    accepted = accepted_corpus_items()
    rejected = [p for p in files if p not in {e.path for e in accepted}]
    assert accepted and rejected
    with served(kind, tmp_path) as server:
        tokens = add_users(server, "ann", "bob")
        server.start()
        imported = server.paigraph(
            "market", "import", str(CORPUS), "--tag", "corpus", token=tokens["ann"]
        )
        assert imported.returncode == 1, imported.stderr  # some files are rejected
        lines = imported.stdout.splitlines()
        summary = lines[-1]
        counts = re.fullmatch(
            r"(\d+) published \((\d+) new items, (\d+) new versions\), (\d+) unchanged, "
            r"(\d+) rejected, of (\d+) files",
            summary,
        )
        assert counts, summary
        published, new_items, _, unchanged, refused, total = map(int, counts.groups())
        names = {e.name for e in accepted}
        assert total == len(files) and refused == len(rejected)
        assert published + unchanged == len(accepted) and new_items == len(names)
        for path in rejected:  # each named, with at least one error under it
            at = next(
                n
                for n, line in enumerate(lines)
                if line.startswith("REJECTED") and str(path) in line
            )
            assert lines[at + 1].startswith("    "), lines[at : at + 2]

        # all of them listed (page after page), and searchable
        listed = server.paigraph("market", "list", "--limit", "1000", token=tokens["bob"])
        assert listed.returncode == 0, listed.stderr
        everything = server.client(tokens["bob"]).execute(
            "{ marketplaceItems(first: 100) { pageInfo { hasNextPage } } }"
        )
        assert everything["marketplaceItems"]["pageInfo"]["hasNextPage"] is (len(names) > 100)
        assert sorted(listed_names(listed.stdout)) == sorted(names)
        few = server.paigraph("market", "list", "--limit", "5", token=tokens["bob"])
        assert len(listed_names(few.stdout)) == 5 and "raise --limit" in few.stderr
        images = server.paigraph(
            "market", "list", "--type", "dockerimage", "--limit", "1000", token=tokens["bob"]
        )
        image_names = {e.name for e in accepted if e.kind == "dockerimage"}
        assert image_names and set(listed_names(images.stdout)) == image_names
        cifar = server.paigraph(
            "market", "list", "--search", "cifar", "--limit", "1000", token=tokens["bob"]
        )
        found = listed_names(cifar.stdout)
        assert found and {n for n in names if "cifar" in n.lower()} <= set(found)

        again = server.paigraph("market", "import", str(CORPUS), token=tokens["ann"])
        summary = again.stdout.splitlines()[-1]
        assert summary == (
            f"0 published (0 new items, 0 new versions), {len(accepted)} unchanged, "
            f"{len(rejected)} rejected, of {len(files)} files"
        )


def test_publishing_a_component_with_a_written_password_warns_and_keeps_no_password(
    tmp_path: Path,
) -> None:
    image = tmp_path / "image.yaml"
    image.write_text(
        "name: private-base\ntype: dockerimage\nuri: registry.example.org/team/base:1\n"
        "auth:\n  username: robot\n  password: Wr1tten-Pa55\n"
    )
    with served("sqlite", tmp_path) as server:
        tokens = add_users(server, "ann", "bob")
        server.start()
        published = server.paigraph("market", "publish", str(image), token=tokens["ann"])
        assert published.returncode == 0, published.stderr
        said = " ".join(published.stderr.split())
        assert "warnings:" in said and "auth.password" in said and "literal-credential" in said
        assert "'private-base-password'" in said and "Wr1tten-Pa55" not in said
        shown = server.paigraph(
            "market", "show", published.stdout.strip(), "--content", token=tokens["bob"]
        )
        assert shown.returncode == 0, shown.stderr
        assert "<% $secrets.private-base-password %>" in shown.stdout
        assert "Wr1tten-Pa55" not in shown.stdout and "robot" not in shown.stdout
