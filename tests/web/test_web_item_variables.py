"""Seed 004's items with template variables in headless chromium against a real `paigraph
serve` on the Docker simulator: published verbatim on the publish page (placeholders where YAML
expects a value), used from "Use" and from a role's picker with the variables given in forms
prefilled with their defaults, the job getting seed 004's `extras.reference_prerequisites`, and
running. Also the admins' Users page: add a user, give a new token, remove a user."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
import yaml

from tests.browser_support import Site, browser_page, screenshot, start_empty_job
from tests.simulated import IMAGE
from tests.web.test_web_submit import editor_text, no_problems, submit_and_watch

pytestmark = [pytest.mark.browser, pytest.mark.docker]

# seed 004's mnist, runnable here: its placeholders unquoted where YAML expects a value
MNIST = """\
name: mnist
type: data
plugin: cmd
plugin_params:
  callbacks:
    - event: taskStarts
      commands:
        - mkdir -p {{ dataPath }}
        - echo "digits in {{ dataPath }}" > {{ dataPath }}/README
template_variables:
  - name: dataPath
    default: /dataset/mnist
"""

CONFIGNFS_PVC = """\
name: confignfs_pvc
plugin: pvc_storage
plugin_params:
  name: confignfs
  mountPath: {{ mountPath }}
template_variables:
  - name: mountPath
"""


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def _use_the_test_image(page: Any) -> None:
    """The empty job's docker image is the local test image (what seeds' images are here)."""
    images = page.locator("[data-prereq-type=dockerimage]")
    images.locator("input[name=prereq-uri]").fill(IMAGE)


def _logs(site: Site, page: Any, token: str) -> str:
    job_id = page.url.rsplit("/", 1)[-1]
    done = site.server.paigraph("logs", job_id, "taskrole", "0", token=token)
    return done.stdout + done.stderr


def test_seed_004_items_publish_verbatim_and_use_gives_the_dataset_its_variable(
    site: Site, web_browser: Any
) -> None:
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        for text in (MNIST, CONFIGNFS_PVC):
            page.goto("/marketplace/publish")
            page.fill("#content", text)
            page.get_by_role("button", name="Publish").click()
            page.wait_for_url(re.compile(r"/marketplace/(?!publish)[^/?]+$"))
            expect(page.get_by_test_id("content")).to_have_text(text)  # kept as written
            if text is MNIST:  # a plugin-based item: its plugin where others have a URI
                provided = page.get_by_test_id("prerequisites").locator("tbody tr")
                expect(provided.locator("td").nth(2)).to_have_text("plugin cmd")
        variables = page.get_by_test_id("template-variables")
        expect(variables).to_contain_text("mountPath")
        expect(variables).to_contain_text("none: each use gives one")

    with browser_page(web_browser, site.url, site.bob) as (page, _):
        page.goto("/marketplace?type=DATA")
        page.locator("li[data-item=mnist]").get_by_role("link", name="mnist").click()
        field = page.get_by_label("Template variable dataPath")
        expect(field).to_have_value("/dataset/mnist")  # the declared default
        field.fill("")
        expect(page.get_by_role("button", name="Use in a new job")).to_be_disabled()
        field.fill("/dataset/digits")
        screenshot(page, "item-variables-use")
        page.get_by_role("link", name="Use in a new job").click()
        page.wait_for_url(re.compile(r"/submit\?"))
        page.locator("[data-role-form=taskrole]").wait_for()
        made = yaml.safe_load(editor_text(page))
        assert made["taskRoles"]["taskrole"]["prerequisites"] == ["mnist"]
        assert made["extras"]["reference_prerequisites"] == [
            {
                "name": "mnist",
                "require": [
                    {
                        "name": "marketplace://name/mnist",
                        "template_variables": {"dataPath": "/dataset/digits"},
                    }
                ],
            }
        ]
        role = page.locator("[data-role-form=taskrole]")
        expect(role.get_by_label("Template variable dataPath of mnist")).to_have_value(
            "/dataset/digits"
        )
        _use_the_test_image(page)
        role.get_by_role("button", name="Add command").click()
        role.get_by_label("Command 2").fill("cat /dataset/digits/README")
        no_problems(page)
        submit_and_watch(page)
        assert "digits in /dataset/digits" in _logs(site, page, site.bob)


def test_a_role_picker_asks_for_the_template_variables_and_writes_seed_004s_yaml(
    site: Site, web_browser: Any
) -> None:
    site.publish(site.root, MNIST.replace("name: mnist", "name: picked_mnist"))
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto("/submit")
        role = start_empty_job(page, IMAGE)
        role.get_by_role("button", name="Pick a data set from the marketplace").click()
        picker = role.locator("[data-picker=DATA]")
        picker.get_by_label("Search a data set").fill("picked_mnist")
        picker.get_by_role("button", name="Use picked_mnist").click()
        field = picker.get_by_label("Template variable dataPath")
        expect(field).to_have_value("/dataset/mnist")
        screenshot(page, "item-variables-picker")
        picker.get_by_role("button", name="Add picked_mnist with these values").click()
        made = yaml.safe_load(editor_text(page))
        assert made["taskRoles"]["taskrole"]["prerequisites"] == ["picked_mnist"]
        assert "data" not in made["taskRoles"]["taskrole"]
        assert made["extras"]["reference_prerequisites"] == [
            {
                "name": "picked_mnist",
                "require": [
                    {
                        "name": "marketplace://name/picked_mnist",
                        "template_variables": {"dataPath": "/dataset/mnist"},
                    }
                ],
            }
        ]
        # the value stays editable in the role's form
        role.get_by_label("Template variable dataPath of picked_mnist").fill("/data/picked")
        expect(page.locator(".cm-content")).to_contain_text("dataPath: /data/picked")
        role.get_by_role("button", name="Add command").click()
        role.get_by_label("Command 1").fill("cat /data/picked/README")
        no_problems(page)
        submit_and_watch(page)
        assert "digits in /data/picked" in _logs(site, page, site.alice)


def test_an_admin_adds_renews_and_removes_users_on_the_users_page(
    site: Site, web_browser: Any
) -> None:
    def works(token: str) -> bool:
        answer = httpx.post(
            f"{site.url}/graphql",
            json={"query": "{ viewer { name } }"},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        return answer.status_code == 200 and answer.json()["data"]["viewer"]["name"] == "dave"

    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto("/")
        page.get_by_test_id("viewer").wait_for()
        expect(page.get_by_role("link", name="Users")).to_have_count(0)

    with browser_page(web_browser, site.url, site.root) as (page, _):
        page.goto("/")
        page.get_by_role("link", name="Users").click()
        page.fill("input[name=user-name]", "dave")
        page.fill("input[name=user-vcs]", "research")
        page.get_by_role("button", name="Add user").click()
        first = page.get_by_test_id("token").inner_text()
        assert works(first)
        row = page.locator("tr[data-user=dave]")
        expect(row).to_contain_text("research")
        screenshot(page, "users-page")

        row.get_by_role("button", name="New token").click()
        expect(page.get_by_test_id("issued-token")).to_contain_text("given a new token")
        second = page.get_by_test_id("token").inner_text()
        assert second != first and works(second) and not works(first)

        row.get_by_role("button", name="Remove").click()
        page.get_by_role("alertdialog", name="Confirm removing dave").get_by_role(
            "button", name="Yes, remove"
        ).click()
        expect(page.locator("tr[data-user=dave]")).to_have_count(0)
        assert not works(second)
        page.get_by_label("Show removed users").check()
        removed_at = page.locator("tr[data-user=dave] td").nth(4)
        expect(removed_at).not_to_have_text("—")
        # an admin cannot remove themselves from here
        expect(
            page.locator("tr[data-user=root]").get_by_role("button", name="Remove")
        ).to_have_count(0)
