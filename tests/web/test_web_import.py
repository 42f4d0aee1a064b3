"""Opening the seeds' own jobs on the Submit page, in headless chromium against a real
`paigraph serve` whose simulated cluster has no GPUs at all: each job, in any dialect, opens in
the forms however much the cluster refuses of it, every problem is listed at once at its own
line, and the refusals are fixed in the forms and in the editor. A draft-dialect template from
the marketplace opens the same way; the page's layout holds at 800 px and with long lines.

The jobs are the seeds' example files as written, taken from the seed documents when the test
runs (tests/corpus.py; skipped, naming the folder, when they are missing). Each step is
photographed into build/screenshots/import-*/.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.browser_support import (
    Site,
    Steps,
    browser_page,
    checked,
    editor_text,
    need_browser_and_build,
)
from tests.corpus import seed_job
from tests.servers import served

pytestmark = [pytest.mark.browser, pytest.mark.docker, pytest.mark.shared("seeds")]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A server on a simulated cluster whose settings say it has no GPUs."""
    need_browser_and_build()
    folder = tmp_path_factory.mktemp("web-import")
    settings = folder / "simulator.yaml"
    settings.write_text("gpus_per_node: 0\nuse_host_gpus: false\n")
    with served("sqlite", folder) as server:
        server.settings["PAIGRAPH_SIMULATOR_CONFIG"] = str(settings)
        server.start()
        yield Site(server)


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    found = [n for n, line in enumerate(text.splitlines(), 1) if needle in line]
    return found[occurrence - 1]


def problems(page: Any) -> list[tuple[str, int]]:
    """The listed problems: (path, line)."""
    items = page.locator("li.problem")
    return [
        (items.nth(n).get_attribute("data-path"), int(items.nth(n).get_attribute("data-line")))
        for n in range(items.count())
    ]


def wait_for_problem_paths(page: Any, paths: list[str]) -> None:
    """Wait until the problem list shows exactly `paths`, in order."""
    from playwright.sync_api import expect

    expect(page.locator("li.problem")).to_have_count(len(paths))
    for n, path in enumerate(paths):
        expect(page.locator("li.problem").nth(n)).to_have_attribute("data-path", path)


def write_seed_file(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def test_seed_000_draft_job_opens_in_the_forms_and_its_refusals_are_fixed_there(
    site: Site, web_browser: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    job_file = write_seed_file(
        tmp_path, "tensorflow_cifar10.yaml", seed_job("000", "tensorflow_cifar10")
    )
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        steps = Steps(page, "import-seed-000")
        page.goto("/submit")
        page.get_by_role("heading", name="Submit a job").wait_for()
        page.set_input_files("input[name=import]", str(job_file))
        expect(page.get_by_test_id("source-note")).to_contain_text(
            "Imported tensorflow_cifar10.yaml: converted from the draft dialect"
        )
        # the forms show the job although this cluster (no GPUs) cannot run it as written
        worker = page.locator("[data-role-form=worker]")
        expect(worker.locator("input[name=gpu]")).to_have_value("4")
        expect(page.locator("[data-role-form=ps_server]")).to_be_visible()
        # its problem at its own line of the converted job (its hdfs storage is simulated)
        paths = ["taskRoles.worker.resourcePerInstance.gpu"]
        wait_for_problem_paths(page, paths)
        text = editor_text(page)
        assert problems(page) == [(paths[0], line_of(text, "gpu: 4"))]
        expect(page.locator("li.problem").first).to_contain_text(
            "asks 4 gpus, but the cluster has no gpus"
        )
        expect(page.get_by_test_id("submit")).to_have_text("Submit (1 problem)")
        steps.shot("imported-with-every-problem")

        # the parameters stay parameters: the commands name them, the form sets them
        last = worker.get_by_label("Command 4")
        expect(last).to_have_value(re.compile(r"--model=<% \$parameters\.model %>"))
        assert int(last.get_attribute("rows")) > 1
        assert last.evaluate("node => node.scrollHeight <= node.clientHeight + 1")
        expect(page.locator("input[name=parameter-model]")).to_have_attribute(
            "placeholder", "default: resnet20"
        )

        # the editor and its problems stay in view while the forms are edited further down
        page.locator("[data-role-form=ps_server]").get_by_label(
            "Command 1"
        ).scroll_into_view_if_needed()
        assert page.evaluate("window.scrollY") > 200
        box = page.locator(".yaml-editor").bounding_box()
        assert box is not None and 0 <= box["y"] < 100, box
        steps.shot("scrolled-down-editor-in-view")

        # the refusal fixed in the forms
        worker.locator("input[name=gpu]").fill("0")
        page.get_by_test_id("problems").get_by_text("No problems.").wait_for()
        steps.shot("gpu-fixed-in-the-form")

        # an edit in the editor: the storage becomes one of the user's own instead
        uri = "hdfs://10.151.40.179:9000/core/cifar10_model"
        page.locator(".cm-line", has_text=uri).click()
        page.keyboard.press("End")
        for _ in uri:
            page.keyboard.press("Backspace")
        page.keyboard.type("cifar10_model")
        page.get_by_test_id("problems").get_by_text("No problems.").wait_for()
        assert "cifar10_model" in yaml.safe_load(editor_text(page))["prerequisites"][3]["uri"]
        steps.shot("storage-fixed-in-the-editor")

        # a parameter changes what runs
        page.fill("input[name=parameter-model]", "resnet56")
        page.get_by_test_id("problems").get_by_text("No problems.").wait_for()
        page.get_by_test_id("preview").locator("summary").first.click()
        resolved = page.get_by_test_id("resolved-config")
        expect(resolved).to_contain_text("--model=resnet56")
        expect(resolved).to_contain_text("--batch_size=32")
        # each instance's environment stays inside the window
        env = page.locator("[data-instance-env=worker-0]")
        env.locator("summary").click()
        env.locator("tr", has_text="PAI_TASK_ROLE_worker_HOST_LIST").wait_for()
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        steps.shot("preview-with-the-parameter")
        expect(page.get_by_test_id("submit")).to_have_text("Submit")


@pytest.mark.parametrize(
    ("seed", "name", "file", "where"),
    [
        ("001", "tensorflow_serving_mnist", "mnist.yaml", [("gpu: 1", 1)]),
        ("002", "tensorflow_serving_mnist", "mnist.yaml", [("gpu: 1", 1)]),
        (
            "003",
            "tensorflow-distributed-jobguid",
            "tensorflow.json",
            # its $PAI_DEFAULT_FS_URI data, output and code are on the simulated HDFS
            [("virtualCluster: your_virtual_cluster", 1), ("gpu: 4", 1)],
        ),
    ],
)
def test_other_seed_jobs_open_in_the_forms_with_their_problems_at_their_lines(
    site: Site,
    web_browser: Any,
    tmp_path: Path,
    seed: str,
    name: str,
    file: str,
    where: list[tuple[str, int]],
) -> None:
    from playwright.sync_api import expect

    language = "js" if file.endswith(".json") else "yaml"
    job_file = write_seed_file(tmp_path, file, seed_job(seed, name, language))
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        steps = Steps(page, f"import-seed-{seed}")
        page.goto("/submit")
        page.set_input_files("input[name=import]", str(job_file))
        expect(page.get_by_test_id("source-note")).to_contain_text("converted from the")
        expect(page.locator("[data-role-form=worker]")).to_be_visible()
        checked(page)
        expect(page.locator("li.problem")).to_have_count(len(where))
        text = editor_text(page)
        listed = problems(page)
        assert [line for _, line in listed] == [line_of(text, *needle) for needle in where]
        assert all(line > 1 for _, line in listed)
        if language == "js":  # the seed's JSON has comments: the page says they were left out
            expect(page.get_by_test_id("conversion-notes")).to_contain_text("comments")
        steps.shot(f"seed-{seed}-imported")


def test_a_draft_template_is_published_with_a_warning_and_used_in_the_forms(
    site: Site, web_browser: Any
) -> None:
    from playwright.sync_api import expect

    draft = seed_job("000", "tensorflow_cifar10")
    with browser_page(web_browser, site.url, site.bob) as (page, _):
        steps = Steps(page, "import-draft-template")
        page.goto("/marketplace/publish")
        page.fill("#content", draft)
        page.get_by_role("button", name="Publish").click()
        warned = page.get_by_test_id("publish-warnings")
        expect(warned).to_contain_text("written in the draft protocol")
        expect(warned).to_contain_text("converts it to protocol v2")
        steps.shot("published-with-a-warning")
        page.get_by_role("link", name="Use").click()
        expect(page.get_by_test_id("source-note")).to_contain_text(
            "Template tensorflow_cifar10 1.0.0: converted from the draft dialect"
        )
        expect(page.get_by_test_id("source-note")).not_to_contain_text("import it again")
        expect(page.locator("[data-role-form=worker]")).to_be_visible()
        checked(page)
        expect(page.locator("li.problem")).to_have_count(1)  # its GPUs, on this cluster
        steps.shot("template-in-the-forms")


def test_the_page_holds_its_layout_and_the_forms_clean_up_after_themselves(
    site: Site, web_browser: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    job_file = write_seed_file(
        tmp_path, "tensorflow_cifar10.yaml", seed_job("000", "tensorflow_cifar10")
    )
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        steps = Steps(page, "import-layout")
        # a template that cannot be used leaves a banner, which "Start empty" clears
        page.goto("/submit?template=no-such-template")
        expect(page.get_by_role("alert")).to_contain_text("cannot be used")
        steps.shot("a-template-that-cannot-be-used")
        page.get_by_role("button", name="Start empty").click()
        expect(page.get_by_role("alert")).to_have_count(0)
        # removing the last prerequisite in the forms removes the key
        images = page.locator("[data-prereq-type=dockerimage]")
        images.get_by_role("button", name="Add docker image").click()
        images.locator("input[name=prereq-uri]").fill("paigraph/busybox:test")
        expect(page.locator(".cm-line", has_text="prerequisites:")).to_have_count(1)
        images.get_by_role("button", name="Remove").click()
        expect(page.locator(".cm-line", has_text="prerequisites")).to_have_count(0)
        assert "prerequisites" not in editor_text(page)
        steps.shot("last-prerequisite-removed")

        # the editor wraps long lines, shown from their first column after an import
        page.set_viewport_size({"width": 800, "height": 900})
        page.locator(".cm-content").click()
        page.keyboard.press("Control+End")
        page.keyboard.type("# " + "a long comment " * 30)
        page.set_input_files("input[name=import]", str(job_file))
        expect(page.get_by_test_id("source-note")).to_contain_text("converted from the draft")
        scroller = page.locator(".cm-scroller")
        assert scroller.evaluate("node => node.scrollLeft") == 0
        assert scroller.evaluate("node => node.scrollWidth <= node.clientWidth + 1")
        expect(page.locator(".cm-content")).to_have_class(re.compile("cm-lineWrapping"))
        # at 800 px the editor is whole, inside the window
        box = page.locator(".yaml-editor").bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 800, box
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        checked(page)
        steps.shot("800px")


def test_a_draft_the_protocol_cannot_read_is_fixed_in_the_editor_then_converted(
    site: Site, web_browser: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    draft = textwrap.dedent(
        """\
        protocol_version: v2
        name: counted
        type: job
        parameters: {workers: 2}
        prerequisites:
          - {protocol_version: v2, name: box, type: dockerimage, uri: paigraph/busybox:test}
        tasks:
          - role: worker
            resource:
              instances: $$workers$$
              resourcePerInstance:
                cpu: 1
                memoryMB: 12
                gpu: 0
            command:
              - echo $$workers$$ workers
        """
    )
    job_file = write_seed_file(tmp_path, "counted.yaml", draft)
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        steps = Steps(page, "import-draft-fixed")
        page.goto("/submit")
        page.set_input_files("input[name=import]", str(job_file))
        note = page.get_by_test_id("source-note")
        expect(note).to_contain_text('press "Convert to protocol v2"')
        expect(note).not_to_contain_text("import it again")
        checked(page)
        wait_for_problem_paths(page, ["tasks.0.resource.resourcePerInstance.memoryMB"])
        assert problems(page)[0][1] == line_of(draft, "memoryMB: 12")
        steps.shot("draft-with-a-problem-at-its-line")
        # fixed in the editor, then converted without any file
        page.locator(".cm-line", has_text="memoryMB: 12").click()
        page.keyboard.press("End")
        page.keyboard.type("8")
        page.get_by_test_id("problems").get_by_text("No problems.").wait_for()
        page.get_by_test_id("convert").click()
        expect(note).to_contain_text("This job: converted from the draft dialect")
        expect(note).to_contain_text("1 value could not stay as written")
        worker = page.locator("[data-role-form=worker]")
        expect(worker.locator("input[name=instances]")).to_have_value("2")
        # the count a parameter gave is a number now, and the page says so beside it
        expect(worker.locator("[data-note-for=instances]")).to_contain_text("parameter 'workers'")
        expect(worker.get_by_label("Command 1")).to_have_value(
            "echo <% $parameters.workers %> workers"
        )
        page.fill("input[name=parameter-workers]", "5")
        page.get_by_test_id("problems").get_by_text("No problems.").wait_for()
        page.get_by_test_id("preview").locator("summary").first.click()
        resolved = page.get_by_test_id("resolved-config")
        expect(resolved).to_contain_text("echo 5 workers")
        steps.shot("converted-with-a-note-at-instances")
