"""The Submit Job page in headless chromium against a real `paigraph serve` on the Docker
simulator: import a file, break and fix it in the editor, submit and watch the job succeed;
build a job with the forms alone; pick prerequisites from the marketplace; preview the
environment of an instance; use a template with a parameter; keep a draft over a reload."""

from __future__ import annotations

import base64
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.browser_support import (
    Site,
    browser_page,
    editor_text,
    keep_for_docs,
    no_problems,
    screenshot,
    start_empty_job,
)
from tests.servers import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.docker]

IMAGE = "paigraph/busybox:test"


def submit_and_watch(page: Any, timeout: float = 90_000) -> None:
    """Submit (no problems left), land on the job page and see the job succeed."""
    from playwright.sync_api import expect

    expect(page.get_by_test_id("submit")).to_have_text("Submit")
    page.get_by_test_id("submit").click()
    page.wait_for_url(re.compile(r"/jobs/[^/?]+$"))
    page.wait_for_selector("h1 [data-state=SUCCEEDED]", timeout=timeout)


def line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


def test_import_a_file_break_a_field_fix_it_and_submit(site: Site, web_browser: Any) -> None:
    from playwright.sync_api import expect

    example = ROOT / "examples" / "ps-worker.yaml"
    source = example.read_text()
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto("/")
        page.get_by_role("link", name="Submit job").click()
        page.get_by_role("heading", name="Submit a job").wait_for()
        page.set_input_files("input[name=import]", str(example))
        expect(page.get_by_test_id("source-note")).to_contain_text("Imported ps-worker.yaml")
        no_problems(page)
        # the forms show what the file says
        worker = page.locator("[data-role-form=worker]")
        expect(worker.locator("input[name=instances]")).to_have_value("2")
        # break the worker's instance count in the editor
        line = line_of(source, "instances: 2")
        target = page.locator(".cm-line", has_text="instances: 2")
        target.click()
        page.keyboard.press("End")
        page.keyboard.press("Backspace")
        page.keyboard.type("-3")
        problem = page.locator("li.problem[data-path='taskRoles.worker.instances']")
        problem.wait_for()
        assert problem.get_attribute("data-line") == str(line)
        assert f"line {line}" in problem.inner_text()
        # the completion counts now exceed the instances too: every problem is listed and counted
        listed = page.locator("li.problem")
        expect(listed).to_have_count(3)
        expect(page.get_by_test_id("submit")).to_have_text("Submit (3 problems)")
        # a rule about a field the file does not write points at the role, the path named
        unwritten = page.locator(
            "li.problem[data-path='taskRoles.worker.completion.minFailedInstances']"
        )
        assert unwritten.get_attribute("data-line") == str(line_of(source, "  worker:"))
        # the editor marks the field on that line, and the form shows the broken value
        marked = page.locator(".cm-line", has_text="instances: -3").locator(".cm-lintRange-error")
        expect(marked).to_have_text("instances: -3")
        expect(worker.locator("input[name=instances]")).to_have_value("-3")
        screenshot(page, "submit-error")
        # fix it
        page.locator(".cm-line", has_text="instances: -3").click()
        page.keyboard.press("End")
        page.keyboard.press("Backspace")
        page.keyboard.press("Backspace")
        page.keyboard.type("2")
        no_problems(page)
        assert editor_text(page).strip() == source.strip()  # the very text imported
        submit_and_watch(page)
        expect(page.locator("h1")).to_contain_text("ps-worker")


def test_a_two_role_job_built_with_the_forms_alone(site: Site, web_browser: Any) -> None:
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto("/submit")
        page.get_by_role("button", name="Start empty").click()
        page.fill("input[name=job-name]", "by-forms")
        images = page.locator("[data-prereq-type=dockerimage]")
        images.get_by_role("button", name="Add docker image").click()
        images.locator("input[name=prereq-name]").fill("box")
        images.locator("input[name=prereq-uri]").fill(IMAGE)
        roles = page.get_by_test_id("roles-form")
        roles.get_by_role("button", name="Add task role").click()
        leader = page.locator("[data-role-form=taskrole]")
        leader.locator("input[name=role-name]").fill("leader")
        leader = page.locator("[data-role-form=leader]")
        leader.get_by_role("button", name="Add command").click()
        leader.get_by_label("Command 1").fill("echo leader of $PAI_TASK_ROLE_LIST")
        roles.get_by_role("button", name="Add task role").click()
        worker = page.locator("[data-role-form=taskrole2]")
        worker.locator("input[name=role-name]").fill("worker")
        worker = page.locator("[data-role-form=worker]")
        worker.locator("input[name=instances]").fill("2")
        worker.get_by_role("button", name="Add port").click()
        worker.get_by_role("button", name="Add command").click()
        command = "echo worker $PAI_TASK_INDEX on $PAI_PORT_LIST_worker_0_http"
        worker.get_by_label("Command 1").fill(command)
        # start order: the workers start once the leader runs; the leader says when it is ready
        worker.get_by_role("button", name="Add: starts after a role").click()
        assert worker.get_by_label("Starts after role 1").input_value() == "leader"
        assert worker.get_by_label("Starts after when 1").input_value() == "running"
        leader.get_by_label("Readiness of leader").select_option("command")
        leader.get_by_label("Readiness command of leader").fill("true")
        no_problems(page)
        made = yaml.safe_load(editor_text(page))
        assert made == {
            "protocolVersion": 2,
            "name": "by-forms",
            "type": "job",
            "prerequisites": [{"name": "box", "type": "dockerimage", "uri": IMAGE}],
            "taskRoles": {
                "leader": {
                    "instances": 1,
                    "resourcePerInstance": {"cpu": 1, "memoryMB": 256, "gpu": 0},
                    "commands": ["echo leader of $PAI_TASK_ROLE_LIST"],
                    "dockerImage": "box",
                },
                "worker": {
                    "instances": 2,
                    "resourcePerInstance": {
                        "cpu": 1,
                        "memoryMB": 256,
                        "gpu": 0,
                        "ports": {"http": 1},
                    },
                    "commands": [command],
                    "dockerImage": "box",
                },
            },
            "extras": {
                "paigraph": {
                    "taskRoles": {
                        "worker": {"dependsOn": [{"role": "leader", "when": "running"}]},
                        "leader": {"readiness": {"command": ["sh", "-c", "true"]}},
                    }
                }
            },
        }
        shot = screenshot(page, "submit")
        keep_for_docs(shot, "submit-page.png")
        submit_and_watch(page)
        page.locator("tr[data-instance=worker-1]").wait_for()
        said = page.get_by_test_id("starts-after-worker").inner_text()
        assert said.startswith("worker starts after leader is running (1 of 1)"), said


def test_pick_a_docker_image_and_a_data_item_from_the_marketplace(
    site: Site, web_browser: Any
) -> None:
    site.publish(site.alice, f"name: pickbox\ntype: dockerimage\nversion: 1.0.0\nuri: {IMAGE}\n")
    site.publish(
        site.alice,
        "name: pickdata\ntype: data\nversion: 1.0.0\n"
        "description: Points for the picker.\nuri:\n  - http://127.0.0.1:9/points.csv\n",
    )
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto("/submit")
        page.get_by_role("button", name="Start empty").click()
        page.get_by_test_id("roles-form").get_by_role("button", name="Add task role").click()
        role = page.locator("[data-role-form=taskrole]")
        role.get_by_role("button", name="Pick a docker image from the marketplace").click()
        picker = role.locator("[data-picker=DOCKERIMAGE]")
        picker.get_by_label("Search a docker image").fill("pickbox")
        picker.locator("li[data-item=pickbox]").get_by_text(IMAGE).wait_for()
        picker.get_by_role("button", name="Use pickbox").click()
        role.get_by_role("button", name="Pick a data set from the marketplace").click()
        picker = role.locator("[data-picker=DATA]")
        picker.get_by_role("button", name="Use pickdata").click()
        # what the job will get, from the items themselves
        got = role.locator("[data-reference='marketplace://name/pickdata']")
        got.get_by_text("http://127.0.0.1:9/points.csv").wait_for()
        role.locator("[data-reference='marketplace://name/pickbox']").get_by_text(IMAGE).wait_for()
        made = yaml.safe_load(editor_text(page))["taskRoles"]["taskrole"]
        assert made["dockerImage"] == "marketplace://name/pickbox"
        assert made["data"] == "marketplace://name/pickdata"
        assert "marketplace://name/pickbox" in role.locator("input[name=dockerImage]").input_value()


PUT_FILE = "mutation($input: PutFileInput!) { putFile(input: $input) { uri errors { message } } }"


def put_file(site: Site, token: str, uri: str, content: bytes) -> str:
    """Fill a user's simulated HDFS through GraphQL; the file's hdfs://host:port/path."""
    given = {"uri": uri, "contentBase64": base64.b64encode(content).decode()}
    put = site.api(token)(PUT_FILE, input=given)["putFile"]
    assert put["errors"] == [], put
    return str(put["uri"])


def test_browse_hdfs_from_the_role_and_prerequisite_pickers(site: Site, web_browser: Any) -> None:
    from playwright.sync_api import expect

    points = put_file(site, site.alice, "/datasets/points.csv", b"x,y\n1,2\n")
    model = put_file(site, site.alice, "hdfs://10.151.40.179:9000/core/cifar10_model/ckpt", b"w")
    assert points.startswith("hdfs://") and points.endswith(":9000/datasets/points.csv")
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto("/submit")
        role = start_empty_job(page, IMAGE)
        # data: from the default file system's root, into a folder, up and down again, a file
        role.get_by_role("button", name="Browse HDFS for a data set").click()
        browser = role.get_by_role("dialog", name="Browse HDFS for a data set")
        browser.get_by_role("button", name="datasets/").click()
        expect(browser.locator("li[data-entry='points.csv']")).to_contain_text("B")
        browser.get_by_role("button", name="Up").click()
        browser.get_by_role("button", name="datasets/").click()
        browser.get_by_role("button", name="Use points.csv").click()
        expect(browser).to_have_count(0)
        # a storage: another file system, typed, and a folder of it
        role.get_by_role("button", name="Browse HDFS for a storage").click()
        browser = role.get_by_role("dialog", name="Browse HDFS for a storage")
        browser.get_by_label("HDFS location for a storage").fill("hdfs://10.151.40.179:9000/core")
        browser.get_by_role("button", name="Go").click()
        browser.get_by_role("button", name="Use cifar10_model").click()
        command = "test -f /work/points_csv/points.csv && test -f /work/cifar10_model/ckpt"
        role.get_by_role("button", name="Add command").click()
        role.get_by_label("Command 1").fill(command)
        no_problems(page)  # the role names what was picked, and the server accepts it
        made = yaml.safe_load(editor_text(page))
        assert made["prerequisites"][1:] == [
            {"name": "points_csv", "type": "data", "uri": [points]},
            {"name": "cifar10_model", "type": "storage", "uri": [model.removesuffix("/ckpt")]},
        ]
        # the role names them; a storage as its output, as v2 mounts one
        assert made["taskRoles"]["taskrole"]["data"] == "points_csv"
        assert made["taskRoles"]["taskrole"]["output"] == "cifar10_model"
        # a prerequisite's own URI field: the picked location goes into its list
        group = page.locator("[data-prereq-type=data]")
        group.get_by_role("button", name="Add data").click()
        added = page.locator("[data-prereq=data_0]")
        added.get_by_role("button", name="Browse HDFS for data_0's URI").click()
        browser = added.get_by_role("dialog")
        browser.get_by_role("button", name="datasets/").click()
        browser.get_by_role("button", name="Use this folder").click()
        expect(added.locator("textarea[name=prereq-uri]")).to_have_value(
            points.removesuffix("/points.csv")
        )
        made = yaml.safe_load(editor_text(page))
        assert made["prerequisites"][3] == {
            "name": "data_0",
            "type": "data",
            "uri": [points.removesuffix("/points.csv")],
        }
        # the job finds the picked file and folder where the simulator put them
        submit_and_watch(page)
    # another user's trees are their own: bob's default root holds nothing of alice's
    with browser_page(web_browser, site.url, site.bob) as (page, _):
        page.goto("/submit")
        page.get_by_role("button", name="Start empty").click()
        page.get_by_test_id("roles-form").get_by_role("button", name="Add task role").click()
        role = page.locator("[data-role-form=taskrole]")
        role.get_by_role("button", name="Browse HDFS for a script").click()
        browser = role.get_by_role("dialog", name="Browse HDFS for a script")
        browser.get_by_text("Nothing here.").wait_for()
        expect(browser.get_by_role("button", name="datasets/")).to_have_count(0)


def test_the_preview_shows_each_instance_environment(
    site: Site, web_browser: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto("/submit")
        page.set_input_files("input[name=import]", str(ROOT / "examples" / "ps-worker.yaml"))
        no_problems(page)
        preview = page.get_by_test_id("preview")
        preview.locator("summary").first.click()
        worker = preview.locator("[data-instance-env=worker-1]")
        worker.locator("summary").click()
        row = worker.locator("tr", has_text="PAI_TASK_ROLE_worker_HOST_LIST")
        assert re.search(r"worker-0:\d+,worker-1:\d+", row.inner_text()), row.inner_text()
        assert "worker" in preview.get_by_test_id("resolved-config").inner_text()
        # a v1 JSON file is shown converted to v2, and the page says so
        page.set_input_files(
            "input[name=import]", str(ROOT / "examples" / "dialects" / "counting.v1.json")
        )
        expect(page.get_by_test_id("source-note")).to_contain_text(
            "converted from the OpenPAI v1 JSON to protocol v2"
        )
        assert yaml.safe_load(editor_text(page))["protocolVersion"] == 2


def test_a_template_used_with_a_parameter_submits(site: Site, web_browser: Any) -> None:
    from playwright.sync_api import expect

    template = site.publish(
        site.alice,
        textwrap.dedent(
            f"""\
            protocolVersion: 2
            name: greeter
            type: job
            version: 1.0.0
            parameters:
              greeting: hello
            prerequisites:
              - {{name: box, type: dockerimage, uri: "{IMAGE}"}}
            taskRoles:
              main:
                instances: 1
                dockerImage: box
                resourcePerInstance: {{cpu: 1, memoryMB: 128, gpu: 0}}
                commands:
                  - echo "<% $parameters.greeting %> from the template"
            """
        ),
    )["id"]
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto(f"/submit?template={template}&version=1.0.0")
        expect(page.get_by_test_id("source-note")).to_contain_text("Template greeter 1.0.0")
        field = page.locator("input[name=parameter-greeting]")
        expect(field).to_have_attribute("placeholder", "default: hello")
        field.fill("bonjour")
        no_problems(page)
        page.get_by_test_id("preview").locator("summary").first.click()
        resolved = page.get_by_test_id("resolved-config")
        expect(resolved).to_contain_text('echo "bonjour from the template"')
        submit_and_watch(page)
        expect(page.locator("h1")).to_contain_text("greeter")


def test_a_draft_survives_a_reload_without_its_secrets(
    site: Site, web_browser: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    config = tmp_path / "secretive.yaml"
    config.write_text(
        "protocolVersion: 2\nname: secretive\ntype: job\n"
        f"prerequisites:\n  - {{name: box, type: dockerimage, uri: {IMAGE}}}\n"
        "secrets:\n  token: s3cret-in-file\n"
        "taskRoles:\n  main:\n    instances: 1\n    dockerImage: box\n"
        "    resourcePerInstance: {cpu: 1, memoryMB: 128, gpu: 0}\n"
        "    commands: ['test -n \"<% $secrets.token %>\"']\n"
    )
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto("/submit")
        page.set_input_files("input[name=import]", str(config))
        no_problems(page)
        page.fill("input[name=job-name]", "kept-over-reload")
        page.fill("input[name=secret-token]", "typed-secret")
        no_problems(page)
        page.wait_for_timeout(500)  # the draft is kept shortly after a change
        page.reload()
        expect(page.get_by_test_id("source-note")).to_have_text("Your draft was restored.")
        expect(page.locator("input[name=job-name]")).to_have_value("kept-over-reload")
        expect(page.locator("input[name=secret-token]")).to_have_value("")
        stored = page.evaluate("JSON.stringify(Object.assign({}, localStorage))")
        assert "kept-over-reload" in stored
        assert "s3cret-in-file" not in stored and "typed-secret" not in stored
        assert "s3cret-in-file" not in editor_text(page)


def test_clone_from_the_job_page_and_a_new_job_from_a_data_item(
    site: Site, web_browser: Any
) -> None:
    from playwright.sync_api import expect

    job_id = site.api(site.alice).submit(
        f"protocolVersion: 2\nname: original\ntype: job\n"
        f"prerequisites:\n  - {{name: box, type: dockerimage, uri: {IMAGE}}}\n"
        "taskRoles:\n  main:\n    instances: 1\n    dockerImage: box\n"
        "    resourcePerInstance: {cpu: 1, memoryMB: 128, gpu: 0}\n"
        "    commands: [echo original]\n"
    )
    data = site.publish(
        site.alice, "name: clonedata\ntype: data\nuri:\n  - http://127.0.0.1:9/c.csv\n"
    )["id"]
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto(f"/jobs/{job_id}")
        page.get_by_test_id("clone").click()
        expect(page.get_by_test_id("source-note")).to_contain_text("A copy of job original")
        no_problems(page)
        assert yaml.safe_load(editor_text(page))["taskRoles"]["main"]["commands"] == [
            "echo original"
        ]
        page.goto(f"/submit?data={data}")
        expect(page.get_by_test_id("source-note")).to_contain_text(
            "A new job using the data clonedata"
        )
        made = yaml.safe_load(editor_text(page))
        (role,) = made["taskRoles"].values()
        references = [role.get("data"), *role.get("prerequisites", [])]
        assert any(str(r).startswith("marketplace://") for r in references if r), role
