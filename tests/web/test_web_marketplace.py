"""The marketplace pages in headless chromium against a real `paigraph serve` on the Docker
simulator: publishing (pasted YAML, a file, a job), finding and starring as another user,
filters, sorts and pages kept in the URL, private items, versions, editing and deleting,
errors at their fields, and the links that hand an item to the Submit page."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

from tests.browser_support import (
    Site,
    browser_page,
    keep_for_docs,
    screenshot,
)
from tests.marketplace_support import data_item, template
from tests.simulated import job_config
from tests.web.test_web_submit import editor_text, no_problems, submit_and_watch

pytestmark = [pytest.mark.browser, pytest.mark.docker]

PAGE_SIZE = 12  # web/src/marketplace/MarketplacePage.tsx


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def card_names(page: Any) -> list[str]:
    """The names on the cards, once the list shows what the address asks for (not still the
    previous list while the new one loads). An empty list is loaded too, though not visible."""
    query = urlparse(page.url).query
    loaded = f"[data-testid=items][aria-busy=false][data-query={query!r}]"
    page.wait_for_selector(loaded, state="attached")
    return page.locator("[data-testid=items] li[data-item]").evaluate_all(
        "cards => cards.map(card => card.dataset.item)"
    )


def item_path(page: Any) -> str:
    """The item page's path the browser is on, once it got there."""
    page.wait_for_url(re.compile(r"/marketplace/(?!publish)[^/?]+$"))
    return urlparse(page.url).path


def test_a_template_published_by_pasting_is_found_by_search_and_starred_by_another_user(
    site: Site, web_browser: Any
) -> None:
    text = template(
        "pasted-tpl",
        description="Counts **sheep** in <b>raw</b> HTML.\n\n<script>window.__ran = 1</script>",
        contributor="Sleep Lab",
        parameters={"sheep": 3},
        commands=["echo <% $parameters.sheep %> sheep"],
    )
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto("/")
        page.get_by_role("link", name="Marketplace").click()
        page.get_by_role("link", name="Publish an item").click()
        page.fill("#content", text)
        page.fill("#tags", "counting, nightly")
        page.fill("#summary", "Counts sheep before sleep")
        page.get_by_role("button", name="Publish").click()
        path = item_path(page)
        expect(page.get_by_role("heading", level=1)).to_contain_text("pasted-tpl")
        expect(page.get_by_test_id("owner")).to_have_text("alice")
        expect(page.get_by_test_id("contributor")).to_have_text("Sleep Lab")

    with browser_page(web_browser, site.url, site.bob) as (page, _):
        page.goto("/marketplace")
        page.fill("input[name=q]", "SHEEP BEFORE")  # any case, in the summary; as one types
        page.wait_for_url(re.compile(r"q=SHEEP\+BEFORE"))
        expect(page.get_by_test_id("count")).to_have_text("1 to 1 of 1 item")
        assert card_names(page) == ["pasted-tpl"]
        card = page.locator("li[data-item=pasted-tpl]")
        expect(card).to_contain_text("Counts sheep before sleep")
        expect(card).to_contain_text("by alice")
        expect(card.locator(".tag")).to_have_text(["counting", "nightly"])
        expect(card.get_by_test_id("stars")).to_have_text("★ 0")
        card.get_by_role("link", name="pasted-tpl").click()
        assert urlparse(page.url).path == path

        # the description is Markdown; raw HTML in it is never rendered
        description = page.get_by_test_id("description")
        expect(description.locator("strong")).to_have_text("sheep")
        assert description.locator("b, script").count() == 0
        assert page.evaluate("window.__ran") is None
        expect(page.get_by_test_id("parameters").locator("tbody td")).to_have_text(["sheep", "3"])
        expect(page.locator("tr[data-role=main]")).to_contain_text("echo 3 sheep")

        star = page.get_by_role("button", name="☆ Star")
        star.click()
        expect(page.get_by_test_id("stars")).to_have_text("1 star")
        expect(page.get_by_role("button", name="★ Unstar")).to_have_attribute(
            "aria-pressed", "true"
        )
        page.reload()
        expect(page.get_by_test_id("stars")).to_have_text("1 star")
        expect(page.get_by_test_id("description").locator("strong")).to_have_text("sheep")
        screenshot(page, "marketplace-item")
        page.get_by_role("link", name="Marketplace").first.click()
        page.fill("input[name=q]", "pasted-tpl")
        expect(page.locator("li[data-item=pasted-tpl]").get_by_test_id("stars")).to_have_text("★ 1")
        # bob may not change alice's item
        page.goto(path)
        page.get_by_test_id("stars").wait_for()
        assert page.get_by_role("link", name="Edit").count() == 0
        assert page.get_by_role("button", name="Delete").count() == 0

        page.get_by_role("button", name="★ Unstar").click()
        expect(page.get_by_test_id("stars")).to_have_text("0 stars")


def test_a_template_is_published_from_a_file(site: Site, web_browser: Any, tmp_path: Path) -> None:
    file = tmp_path / "from-file.yaml"
    file.write_text(template("from-file", description="Read from a file."))
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto("/marketplace/publish")
        page.set_input_files("input[type=file]", str(file))
        expect(page.locator("#content")).to_contain_text("name: from-file")
        page.get_by_role("button", name="Publish").click()
        item_path(page)
        expect(page.locator("main .lead")).to_have_text("Read from a file.")
        expect(page.get_by_test_id("content")).to_contain_text("name: from-file")


def test_filter_by_type_and_tag_sort_and_page_through_more_than_one_page(
    site: Site, web_browser: Any
) -> None:
    shelf = [f"shelf-data-{n:02d}" for n in range(PAGE_SIZE + 2)]
    for name in shelf:
        site.publish(
            site.alice,
            data_item(name),
            tags=["shelf", "images" if name.endswith("3") else "tables"],
            summary=f"Rows of {name}",
        )
    popular = site.publish(
        site.bob, template("shelf-popular"), tags=["shelf"], summary="Reads every shelf at once"
    )
    used = site.publish(
        site.bob, template("shelf-used"), tags=["shelf"], summary="Sorts one shelf a night"
    )
    for token in (site.alice, site.root):
        site.api(token)(
            "mutation($id: ID!) { starMarketplaceItem(input: {id: $id}) { errors { code } } }",
            id=popular["id"],
        )
    submitted = site.api(site.bob)(
        "mutation($id: ID!) { useMarketplaceItem(input: {id: $id, submit: true}) "
        "{ job { id } errors { message } } }",
        id=used["id"],
    )["useMarketplaceItem"]
    assert submitted["errors"] == [] and submitted["job"], submitted

    with browser_page(web_browser, site.url, site.bob) as (page, _):
        page.goto("/marketplace")
        page.select_option("select[name=tag]", "shelf")
        page.wait_for_url(re.compile(r"tag=shelf"))
        expect(page.get_by_test_id("count")).to_have_text(f"1 to {PAGE_SIZE} of 16 items")
        shot = screenshot(page, "marketplace")
        keep_for_docs(shot, "marketplace-page.png")

        # most recent first: the two templates were published last
        assert card_names(page)[:2] == ["shelf-used", "shelf-popular"]
        page.select_option("select[name=sort]", "STARS")
        page.wait_for_url(re.compile(r"sort=STARS"))
        expect(page.locator("li[data-item]").first).to_have_attribute("data-item", "shelf-popular")
        expect(page.locator("li[data-item=shelf-popular]").get_by_test_id("stars")).to_have_text(
            "★ 2"
        )
        page.select_option("select[name=sort]", "SUBMITS")
        page.wait_for_url(re.compile(r"sort=SUBMITS"))
        expect(page.locator("li[data-item]").first).to_have_attribute("data-item", "shelf-used")
        expect(page.locator("li[data-item=shelf-used]").get_by_test_id("submits")).to_have_text(
            "▶ 1"
        )

        page.select_option("select[name=type]", "DATA")
        page.wait_for_url(re.compile(r"type=DATA"))
        # a new type starts without a tag: the tags offered are those of data items
        assert "tag=" not in page.url
        expect(page.locator("select[name=tag] option")).to_contain_text(["any", "shelf (14)"])
        page.select_option("select[name=tag]", "shelf")
        page.select_option("select[name=sort]", "RECENT")
        page.wait_for_url(lambda url: "sort=" not in url)
        first = card_names(page)
        expect(page.get_by_test_id("count")).to_have_text(f"1 to {PAGE_SIZE} of 14 items")
        assert len(first) == PAGE_SIZE and all(n.startswith("shelf-data-") for n in first)
        page.get_by_role("button", name="Next").click()
        expect(page.get_by_test_id("count")).to_have_text(f"{PAGE_SIZE + 1} to 14 of 14 items")
        second = card_names(page)
        assert sorted(first + second) == shelf
        assert "after=" in page.url

        # the list's state survives a reload and can be linked
        page.reload()
        expect(page.get_by_test_id("count")).to_have_text(f"{PAGE_SIZE + 1} to 14 of 14 items")
        expect(page.locator("select[name=type]")).to_have_value("DATA")
        expect(page.locator("select[name=tag]")).to_have_value("shelf")
        page.get_by_role("button", name="Previous").click()
        expect(page.get_by_test_id("count")).to_have_text(f"1 to {PAGE_SIZE} of 14 items")
        assert card_names(page) == first

        page.goto("/marketplace?type=DATA&tag=images")
        expect(page.get_by_test_id("count")).to_have_text("1 to 2 of 2 items")
        assert sorted(card_names(page)) == ["shelf-data-03", "shelf-data-13"]
        # a tag on a card filters by it
        page.locator("li[data-item=shelf-data-03]").get_by_role("button", name="shelf").click()
        page.wait_for_url(re.compile(r"tag=shelf"))
        expect(page.get_by_test_id("count")).to_have_text(f"1 to {PAGE_SIZE} of 14 items")


def test_a_private_item_stays_invisible_to_another_user(site: Site, web_browser: Any) -> None:
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto("/marketplace/publish")
        page.fill("#content", data_item("hush-data", description="Only for alice."))
        page.select_option("#visibility", "PRIVATE")
        page.get_by_role("button", name="Publish").click()
        path = item_path(page)
        page.goto("/marketplace?q=hush")
        expect(page.locator("li[data-item=hush-data] .kind").last).to_have_text("private")

    with browser_page(web_browser, site.url, site.bob) as (page, _):
        page.goto("/marketplace")
        page.get_by_test_id("count").wait_for()
        assert "hush-data" not in card_names(page)
        page.fill("input[name=q]", "hush")
        page.wait_for_url(re.compile(r"q=hush"))
        expect(page.get_by_test_id("count")).to_have_text("No items match.")
        page.goto(path)
        expect(page.get_by_role("alert")).to_contain_text(
            "There is no marketplace item with that ID that you may see"
        )
        assert "Only for alice" not in page.locator("main").inner_text()


def test_the_item_page_shows_versions_and_switching_shows_that_versions_content(
    site: Site, web_browser: Any
) -> None:
    first = site.publish(site.alice, template("versioned", commands=["echo first"]))
    second = site.publish(site.alice, template("versioned", commands=["echo second"]))
    assert (first["id"], first["version"], second["version"]) == (second["id"], "1", "2")
    with browser_page(web_browser, site.url, site.bob) as (page, _):
        page.goto(f"/marketplace/{first['id']}")
        versions = page.get_by_label("Version")
        expect(versions.locator("option")).to_have_count(2)
        expect(versions).to_have_value("2")
        expect(page.get_by_test_id("content")).to_contain_text("echo second")
        expect(page.get_by_text("marketplace://name/versioned", exact=True)).to_be_visible()
        versions.select_option("1")
        page.wait_for_url(re.compile(r"\?version=1$"))
        expect(page.get_by_test_id("content")).to_contain_text("echo first")
        assert "echo second" not in page.get_by_test_id("content").inner_text()
        expect(page.locator("tr[data-role=main]")).to_contain_text("echo first")
        # the reference by name pins the version shown
        expect(page.get_by_text("marketplace://name/versioned@1", exact=True)).to_be_visible()
        page.reload()
        expect(page.get_by_test_id("content")).to_contain_text("echo first")
        page.get_by_label("Version").select_option("2")
        page.wait_for_url(re.compile(r"/marketplace/[^?]+$"))
        expect(page.get_by_test_id("content")).to_contain_text("echo second")


def test_a_job_is_published_as_a_template_from_its_page(site: Site, web_browser: Any) -> None:
    config = job_config(name="to-share", roles={"worker": {"instances": 2, "commands": ["true"]}})
    job_id = site.api(site.alice).submit(config)
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto(f"/jobs/{job_id}")
        page.get_by_role("link", name="Publish as template").click()
        page.wait_for_url(re.compile(r"/marketplace/publish\?job="))
        expect(page.get_by_role("heading", level=1)).to_have_text(
            "Publish job to-share as a template"
        )
        expect(page.get_by_test_id("job-config")).to_contain_text("to-share")
        page.fill("#name", "shared from job")
        page.fill("#tags", "shared-job")
        page.get_by_role("button", name="Publish").click()
        expect(page.get_by_test_id("error-name")).to_contain_text("shared from job")
        page.fill("#name", "shared-from-job")
        page.get_by_role("button", name="Publish").click()
        item_path(page)
        expect(page.get_by_role("heading", level=1)).to_contain_text("shared-from-job")
        expect(page.get_by_test_id("content")).to_contain_text('"name": "shared-from-job"')
        expect(page.locator("h1 .kind")).to_have_text("job template")
        expect(page.locator("tr[data-role=worker] td").nth(1)).to_have_text("2")

    # bob may read alice's job by its ID, not publish it
    with browser_page(web_browser, site.url, site.bob) as (page, _):
        page.goto(f"/jobs/{job_id}")
        page.get_by_text("Config (as submitted").wait_for()
        assert page.get_by_role("link", name="Publish as template").count() == 0
        page.goto(f"/marketplace/publish?job={job_id}")
        expect(page.get_by_role("alert")).to_have_text(
            "Job to-share belongs to alice: only its owner or an admin may publish it."
        )
        assert page.get_by_role("button", name="Publish").count() == 0


def test_a_job_with_a_written_password_is_published_asking_its_users_for_it(
    site: Site, web_browser: Any
) -> None:
    """The password alice wrote into her job is not published: the template declares it as a
    secret, alice is told so, and bob's Submit page asks him for it in a password field."""
    doc = yaml.safe_load(job_config(name="private-pull", roles={"main": {"commands": ["true"]}}))
    doc["prerequisites"][0]["auth"] = {"username": "robot", "password": "Wr1tten-Pa55"}
    job_id = site.api(site.alice).submit(yaml.safe_dump(doc))
    image = doc["prerequisites"][0]["name"]
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto(f"/marketplace/publish?job={job_id}")
        page.fill("#name", "private-pull-template")
        page.get_by_role("button", name="Publish").click()
        item = item_path(page)
        expect(page.get_by_test_id("publish-warnings")).to_contain_text(
            "published without their values"
        )
        expect(page.get_by_test_id("content")).to_contain_text(f'"{image}-password": ""')
        assert "Wr1tten-Pa55" not in page.content() and "robot" not in page.content()
    with browser_page(web_browser, site.url, site.bob) as (page, _):
        page.goto(item)
        page.get_by_role("link", name="Use").click()
        secret = page.locator(f"input[name=secret-{image}-password]")
        expect(secret).to_have_attribute("type", "password")
        assert "Wr1tten-Pa55" not in page.content()


def test_the_owner_edits_a_new_version_then_deletes_the_item(site: Site, web_browser: Any) -> None:
    item = site.publish(site.alice, template("editable", commands=["echo one"]), tags=["old"])
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto(f"/marketplace/{item['id']}")
        page.get_by_role("link", name="Edit").click()
        page.wait_for_url(re.compile(r"/edit$"))
        content = page.locator("#content")
        expect(content).to_contain_text("echo one")
        content.fill(editor_text(page).replace("echo one", "echo two"))
        page.fill("#summary", "Says two now")
        page.fill("#tags", "new, fresh")
        page.get_by_role("button", name="Save").click()
        page.wait_for_url(re.compile(r"/marketplace/[^/]+$"))
        expect(page.get_by_label("Version")).to_have_value("2")
        expect(page.get_by_label("Version").locator("option")).to_have_count(2)
        expect(page.get_by_test_id("content")).to_contain_text("echo two")
        expect(page.locator("main .lead")).to_have_text("Says two now")
        expect(page.locator("dd.tags .tag")).to_have_text(["new", "fresh"])

        page.get_by_role("button", name="Delete").click()
        dialog = page.get_by_role("alertdialog")
        expect(dialog).to_contain_text("Delete editable with all its 2 versions?")
        dialog.get_by_role("button", name="Cancel").click()
        expect(dialog).to_have_count(0)
        page.get_by_role("button", name="Delete").click()
        page.get_by_role("alertdialog").get_by_role("button", name="Yes, delete it").click()
        page.wait_for_url(re.compile(r"/marketplace$"))
        expect(page.get_by_role("status")).to_have_text(
            "editable was deleted with all its versions."
        )
        assert "editable" not in card_names(page)
        page.goto(f"/marketplace/{item['id']}")
        expect(page.get_by_role("alert")).to_contain_text("There is no marketplace item")


def test_a_bad_publish_shows_each_error_at_its_field_and_keeps_what_was_typed(
    site: Site, web_browser: Any
) -> None:
    doc = yaml.safe_load(template("faulty"))
    doc["taskRoles"]["main"]["resourcePerInstance"]["cpu"] = 0
    bad = yaml.safe_dump(doc, sort_keys=False)
    site.publish(site.bob, template("taken-by-bob"))
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto("/marketplace/publish")
        page.fill("#content", bad)
        page.fill("#summary", "Kept while fixing")
        page.get_by_role("button", name="Publish").click()
        errors = page.get_by_test_id("error-content")
        expect(errors).to_contain_text("taskRoles.main.resourcePerInstance.cpu:")
        # the same editor as the Submit page's, the problem marked at its own line
        cpu_line = bad.splitlines().index(
            next(line for line in bad.splitlines() if "cpu: 0" in line)
        )
        marked = page.locator(".cm-line").nth(cpu_line).locator(".cm-lintRange-error")
        expect(marked).to_have_text("cpu: 0")
        assert page.url.endswith("/marketplace/publish")

        page.fill("#content", bad.replace("cpu: 0", "cpu: 1"))
        page.fill("#tags", "ok, " + "x" * 65)
        page.select_option("#visibility", "GROUPS")
        page.fill("#groups", "")
        page.get_by_role("button", name="Publish").click()
        expect(page.get_by_test_id("error-tags")).to_contain_text("is not allowed: use 1 to 64")
        expect(page.get_by_test_id("error-groups")).to_contain_text("name at least one group")
        expect(page.get_by_test_id("error-content")).to_have_count(0)
        expect(page.get_by_role("status")).to_have_text("2 problems to fix")
        expect(page.locator("#summary")).to_have_value("Kept while fixing")

        page.fill("#tags", "ok")
        page.select_option("#visibility", "PUBLIC")
        page.fill("#name", "taken-by-bob")
        page.get_by_role("button", name="Publish").click()
        expect(page.get_by_test_id("error-name")).to_contain_text("taken-by-bob")
        expect(page.locator("#name")).to_have_attribute("aria-invalid", "true")
        page.fill("#name", "")
        page.get_by_role("button", name="Publish").click()
        item_path(page)
        expect(page.get_by_role("heading", level=1)).to_contain_text("faulty")


def test_use_hands_a_template_or_a_dataset_to_the_submit_page_and_references_copy(
    site: Site, web_browser: Any
) -> None:
    tpl = site.publish(site.alice, template("usable", version="1.2"))
    data = site.publish(site.alice, data_item("usable-data"))
    with browser_page(web_browser, site.url, site.bob) as (page, _):
        page.context.grant_permissions(["clipboard-read", "clipboard-write"])
        page.goto(f"/marketplace/{tpl['id']}")
        page.get_by_role("button", name="Copy reference by name").click()
        expect(page.get_by_role("button", name="Copy reference by name")).to_have_text("Copied")
        assert page.evaluate("navigator.clipboard.readText()") == "marketplace://name/usable"
        page.get_by_role("button", name="Copy reference by ID").click()
        assert page.evaluate("navigator.clipboard.readText()") == (
            f"marketplace://prerequisites/itemId/{tpl['id']}"
        )
        page.get_by_role("link", name="Use", exact=True).click()
        page.wait_for_url(re.compile(r"/submit\?"))
        query = parse_qs(urlparse(page.url).query)
        assert query == {"template": [tpl["id"]], "version": ["1.2"]}

        page.goto(f"/marketplace/{data['id']}")
        page.get_by_role("link", name="Use in a new job").click()
        page.wait_for_url(re.compile(r"/submit\?"))
        assert parse_qs(urlparse(page.url).query) == {"data": [data["id"]]}


def test_the_marketplace_walkthrough_publish_find_star_use_with_a_parameter_and_submit(
    site: Site, web_browser: Any
) -> None:
    """The seeds' marketplace walkthrough click by click, across both pages: alice publishes a
    template; bob finds it, stars it, uses it with a parameter of his own, submits, and the job
    succeeds with that value; the item counts the submit."""
    text = template(
        "walkthrough",
        version="1.0.0",
        parameters={"who": "world"},
        commands=['echo "hello <% $parameters.who %>"'],
        description="Says hello to someone.",
    )
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto("/marketplace/publish")
        page.fill("#content", text)
        page.get_by_role("button", name="Publish").click()
        path = item_path(page)

    with browser_page(web_browser, site.url, site.bob) as (page, _):
        page.goto("/marketplace")
        page.fill("input[name=q]", "walkthrough")
        page.wait_for_url(re.compile(r"q=walkthrough"))
        assert card_names(page) == ["walkthrough"]
        page.locator("li[data-item=walkthrough]").get_by_role("link", name="walkthrough").click()
        assert urlparse(page.url).path == path
        page.get_by_role("button", name="☆ Star").click()
        expect(page.get_by_test_id("stars")).to_have_text("1 star")
        page.get_by_role("link", name="Use", exact=True).click()
        page.wait_for_url(re.compile(r"/submit\?"))
        field = page.locator("input[name=parameter-who]")
        expect(field).to_have_attribute("placeholder", "default: world")
        field.fill("bob")
        no_problems(page)
        submit_and_watch(page)
        expect(page.locator("h1")).to_contain_text("walkthrough")
        job_path = urlparse(page.url).path

    api = site.api(site.bob)
    job_id = job_path.rsplit("/", 1)[-1]
    assert api("query($id: ID!) { job(id: $id) { user { name } } }", id=job_id)["job"] == {
        "user": {"name": "bob"}
    }
    logs = site.server.paigraph("logs", job_id, "main", "0", token=site.bob)
    assert "hello bob" in logs.stdout, logs.stdout + logs.stderr
    item_id = path.rsplit("/", 1)[-1]
    item = api("query($id: ID!) { marketplaceItem(id: $id) { stars submits } }", id=item_id)
    assert item["marketplaceItem"] == {"stars": 1, "submits": 1}
