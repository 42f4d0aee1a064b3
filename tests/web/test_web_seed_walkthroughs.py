"""Each seed's walkthrough, step by step in headless chromium against a real `paigraph serve`
on the Docker simulator, with the seed's own example files as written (read from
../shared/seeds when the test runs; skipped, naming the folder, without it): import the file,
edit it in the forms and in the editor, set parameters, preview, submit, watch the live job
page reach its state and read the logs; seed 004's items published verbatim and its dataset
used from "Use" and from a role's picker. Each step is photographed into
build/screenshots/walkthrough-<seed>/.

Only what this machine cannot reach is replaced, outside the jobs, as in
tests/e2e/test_seeds_as_written.py: the seeds' images are the test image tagged under their names
(with stand-ins for the programs they would hold; tests/seed_images.py), their downloads come
from local copies.
"""

from __future__ import annotations

import re
import subprocess
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
    edit_line_in_editor,
    editor_text,
    expect,
    import_file,
    instance_log,
    need_browser_and_build,
    no_problems,
    open_preview,
    open_submit_page,
    start_empty_job,
    submit_and_reach,
)
from tests.corpus import SEEDS, seed_job
from tests.e2e.test_seeds_as_written import (  # noqa: F401 - the seeds' downloads, shared fixtures
    BENCHMARKS,
    CIFAR_URL,
    benchmarks,
    cifar_site,
)
from tests.seed_images import build
from tests.servers import served
from tests.shared_images import images_in_use

pytestmark = [pytest.mark.browser, pytest.mark.docker, pytest.mark.shared("seeds")]


@pytest.fixture(scope="module")
def site(
    tmp_path_factory: pytest.TempPathFactory,
    seed_images: None,
    cifar_site: str,  # noqa: F811
    benchmarks: Path,  # noqa: F811
) -> Iterator[Site]:
    """One server for the module on the default simulated cluster (it has GPUs); its settings
    only say where the seeds' downloads are."""
    need_browser_and_build()
    state = tmp_path_factory.mktemp("walkthroughs")
    settings = state / "simulator.yaml"
    settings.write_text(
        f"allowed_file_roots: [{benchmarks.parent}]\n"
        "allowed_fetch_networks: [127.0.0.1]\n"
        "fetch_mirrors:\n"
        f"  '{CIFAR_URL}': '{cifar_site}'\n"
        f"  '{BENCHMARKS}': '{benchmarks.as_uri()}'\n"
    )
    with served("sqlite", state) as server:
        server.settings["PAIGRAPH_SIMULATOR_CONFIG"] = str(settings)
        server.start()
        yield Site(server)


def seed_file(folder: Path, name: str, text: str) -> Path:
    """The seed's example saved as a person would save it before importing it."""
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def test_seed_000_run_the_cifar10_template_then_import_edit_and_submit_the_file(
    site: Site, web_browser: Any, tmp_path: Path
) -> None:
    written = seed_job("000", "tensorflow_cifar10")
    site.publish(site.root, written)  # the marketplace holds the seed's template
    with browser_page(web_browser, site.url) as (page, watched):
        steps = Steps(page, "walkthrough-000")
        watched.expect(r"HTTP 401: POST .*/graphql|status of 401")  # asking who, signed out
        # login
        page.goto("/")
        page.get_by_role("heading", name="Sign in").wait_for()
        page.fill("input[name=token]", site.alice)
        page.get_by_role("button", name="Sign in").click()
        page.get_by_test_id("viewer").wait_for()
        steps.shot("signed-in")
        # Run a job from marketplace: marketplace, the template, "use", "Submit"
        page.get_by_role("link", name="Marketplace").click()
        page.locator("li[data-item=tensorflow_cifar10]").get_by_role(
            "link", name="tensorflow_cifar10"
        ).click()
        steps.shot("template-details")
        page.get_by_role("link", name="Use", exact=True).click()
        expect(page.get_by_test_id("source-note")).to_contain_text("Template tensorflow_cifar10")
        expect(page.locator("[data-role-form=worker] input[name=gpu]")).to_have_value("4")
        checked(page)
        no_problems(page)
        steps.shot("template-in-the-submit-page")
        submit_and_reach(page, "SUCCEEDED")
        steps.shot("template-job-succeeded")
        log = instance_log(page, "worker", 0, "python stand-in")
        assert "--model=resnet20 --batch_size=32" in log, log
        steps.shot("template-job-worker-log")

        # Submit job v2: import the file, edit it in the forms and in the editor
        open_submit_page(page)
        import_file(page, seed_file(tmp_path, "tensorflow_cifar10.yaml", written))
        worker = page.locator("[data-role-form=worker]")
        expect(worker.locator("input[name=gpu]")).to_have_value("4")
        expect(page.locator("[data-role-form=ps_server]")).to_be_visible()
        checked(page)
        no_problems(page)
        steps.shot("imported")
        page.fill("input[name=parameter-model]", "resnet56")  # the parameters form
        edit_line_in_editor(page, "gpu: 4", "4", "2")  # the editor
        expect(worker.locator("input[name=gpu]")).to_have_value("2")
        worker.locator("input[name=memoryMB]").fill("8192")  # the role's form
        expect(page.locator(".cm-line", has_text="memoryMB: 8192")).to_have_count(2)
        no_problems(page)
        steps.shot("edited-in-forms-and-editor")
        resolved = open_preview(page)
        expect(resolved).to_contain_text("--model=resnet56 --batch_size=32")
        steps.shot("preview")
        job_id = submit_and_reach(page, "SUCCEEDED")
        steps.shot("job-succeeded")
        log = instance_log(page, "worker", 0, "python stand-in")
        assert "--model=resnet56 --batch_size=32" in log, log
        (devices,) = [line for line in log.splitlines() if "NVIDIA_VISIBLE_DEVICES=" in line]
        assert len(devices.split("=", 1)[1].split(",")) == 2, devices  # as edited
        assert "cifar-10-batches-py/data_batch_1" in log  # the data, from the local copy
        steps.shot("worker-log")
    listed = site.server.paigraph(
        "fs", "ls", "hdfs://10.151.40.179:9000/core/cifar10_model/cifar10_model", token=site.alice
    )
    assert "checkpoint-worker-0" in listed.stdout, (job_id, listed.stdout + listed.stderr)


def stop_from_the_job_page(page: Any) -> None:
    """The job page's Stop, confirmed; the job reaches STOPPED."""
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Stop").click()
    page.wait_for_selector("h1 [data-state=STOPPED]", timeout=60_000)


def serving_runs(page: Any, steps: Steps) -> None:
    """The serving job on its live page: running, the model server's log with its port, then
    stopped (it serves until stopped)."""
    steps.shot("job-running")
    port = page.locator("tr[data-instance=worker-0] .ports")
    expect(port).to_contain_text(re.compile(r"model_server: \d+"))
    number = re.search(r"model_server: (\d+)", port.inner_text())
    assert number is not None
    log = instance_log(page, "worker", 0, "model server stand-in")
    assert f"model server stand-in: --port={number[1]} --model_name=mnist" in log, log
    # its first command is the image's own, absent from the stand-in: it ran, and failed
    assert "mnist_saved_model" in log
    steps.shot("worker-log")
    stop_from_the_job_page(page)
    steps.shot("job-stopped")


@pytest.mark.parametrize("seed", ["001", "002"])
def test_seed_tensorflow_serving_mnist_imported_edited_previewed_and_served(
    site: Site, web_browser: Any, tmp_path: Path, seed: str
) -> None:
    written = seed_job(seed, "tensorflow_serving_mnist")
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        steps = Steps(page, f"walkthrough-{seed}")
        open_submit_page(page)
        import_file(page, seed_file(tmp_path, "tensorflow_serving_mnist.yaml", written))
        worker = page.locator("[data-role-form=worker]")
        expect(worker.locator("input[name=gpu]")).to_have_value("1")
        expect(worker.get_by_label("Port label 1")).to_have_value("model_server")
        checked(page)
        no_problems(page)
        steps.shot("imported")
        worker.locator("input[name=cpu]").fill("2")  # in the role's form
        edit_line_in_editor(page, "memoryMB: 8192", "8192", "4096")  # in the editor
        expect(worker.locator("input[name=memoryMB]")).to_have_value("4096")
        expect(page.locator(".cm-line", has_text="cpu: 2")).to_have_count(1)
        no_problems(page)
        steps.shot("edited-in-forms-and-editor")
        open_preview(page)
        env = page.locator("[data-instance-env=worker-0]")
        env.locator("summary").click()
        expect(
            env.locator("tr", has_text="PAI_CONTAINER_HOST_model_server_PORT_LIST")
        ).to_be_visible()
        expect(env.locator("tr", has_text="PAI_CURRENT_TASK_ROLE_CPU_COUNT")).to_contain_text("2")
        steps.shot("preview-with-the-environment")
        submit_and_reach(page, "RUNNING")
        serving_runs(page, steps)


def test_seed_002_the_serving_job_built_in_the_forms_with_its_image_from_the_marketplace(
    site: Site, web_browser: Any
) -> None:
    """The seeds' other way to a job: "add your job components by web UI", the docker image
    chosen from the marketplace (the seed's own prerequisite, published as an item)."""
    written = yaml.safe_load(seed_job("002", "tensorflow_serving_mnist"))
    (image,) = written["prerequisites"]
    site.publish(site.root, yaml.safe_dump(image, sort_keys=False))
    (task,) = written["tasks"]
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        steps = Steps(page, "walkthrough-002-forms")
        open_submit_page(page)
        page.get_by_role("button", name="Start empty").click()
        page.fill("input[name=job-name]", written["name"])
        page.get_by_test_id("roles-form").get_by_role("button", name="Add task role").click()
        page.locator("[data-role-form=taskrole] input[name=role-name]").fill(task["role"])
        role = page.locator(f"[data-role-form={task['role']}]")
        role.get_by_role("button", name="Pick a docker image from the marketplace").click()
        picker = role.locator("[data-picker=DOCKERIMAGE]")
        picker.get_by_label("Search a docker image").fill(image["name"])
        picker.locator(f"li[data-item={image['name']}]").get_by_text(image["uri"]).wait_for()
        steps.shot("docker-image-from-the-marketplace")
        picker.get_by_role("button", name=f"Use {image['name']}").click()
        resources = task["resource"]["resourcePerInstance"]
        for field in ("cpu", "memoryMB", "gpu"):
            role.locator(f"input[name={field}]").fill(str(resources[field]))
        (port,) = task["resource"]["portList"]
        role.get_by_role("button", name="Add port").click()
        role.get_by_label("Port label 1").fill(port["label"])
        role.get_by_label("Port count 1").fill(str(port["portNumber"]))
        for n, command in enumerate(task["command"], 1):
            if n > 1 or role.get_by_label("Command 1").count() == 0:
                role.get_by_role("button", name="Add command").click()
            role.get_by_label(f"Command {n}").fill(command)
        no_problems(page)
        made = yaml.safe_load(editor_text(page))["taskRoles"][task["role"]]
        assert made["dockerImage"] == f"marketplace://name/{image['name']}"
        assert made["resourcePerInstance"] == {**resources, "ports": {port["label"]: 1}}
        assert made["commands"] == task["command"]
        steps.shot("built-in-the-forms")
        submit_and_reach(page, "RUNNING")
        serving_runs(page, steps)


def test_seed_003_v1_job_with_its_code_and_data_on_hdfs_uploaded_fixed_and_run(
    site: Site, web_browser: Any, tmp_path: Path
) -> None:
    # 1. put the code and data on HDFS (the seed's "HDFS cmd" way)
    located = "hdfs://paigraph-dfs:9000/path/tensorflow-distributed-jobguid"
    for part, name, text in (
        ("code", "tf_cnn_benchmarks.py", "# the benchmark\n"),
        ("data", "data_batch_1", "cifar10\n"),
    ):
        (tmp_path / part).mkdir()
        (tmp_path / part / name).write_text(text)
    for args in (
        ("mkdir", located),
        *(("put", str(tmp_path / p), f"{located}/{p}") for p in ("code", "data")),
    ):
        done = site.server.paigraph("fs", *args, token=site.alice)
        assert done.returncode == 0, done.stderr
    # 2. the config file, as the seed writes it; 3. submitted through the web portal
    written = seed_job("003", "tensorflow-distributed-jobguid", "js")
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        steps = Steps(page, "walkthrough-003")
        open_submit_page(page)
        import_file(page, seed_file(tmp_path, "tensorflow-distributed.json", written))
        expect(page.get_by_test_id("conversion-notes")).to_contain_text("comments")
        expect(page.locator("[data-role-form=worker] input[name=instances]")).to_have_value("2")
        checked(page)
        # this cluster has no virtual cluster of the seed's placeholder name: said at its line
        expect(page.locator("li.problem")).to_have_count(1)
        expect(page.locator("li.problem")).to_contain_text("your_virtual_cluster")
        steps.shot("imported-with-its-problem")
        page.fill("input[name=virtual-cluster]", "default")  # fixed in the forms
        no_problems(page)
        edit_line_in_editor(page, "memoryMB: 16384", "16384", "8192")  # the editor
        expect(page.locator("[data-role-form=worker] input[name=memoryMB]")).to_have_value("8192")
        page.fill("input[name=parameter-batch_size]", "64")  # its jobEnvs are parameters
        no_problems(page)
        steps.shot("fixed-and-edited")
        resolved = open_preview(page)
        expect(resolved).to_contain_text("export batch_size='64'")
        steps.shot("preview")
        submit_and_reach(page, "SUCCEEDED")
        steps.shot("job-succeeded")
        log = instance_log(page, "worker", 1, "python stand-in")
        (call,) = [line for line in log.splitlines() if line.startswith("python stand-in: ")]
        assert "--batch_size=64" in call.split(), call
        assert f"--data_dir={located}/data" in call.split(), call
        assert "script found: code/tf_cnn_benchmarks.py" in log
        steps.shot("worker-log")
    listed = site.server.paigraph("fs", "ls", f"{located}/output", token=site.alice)
    assert "checkpoint-worker-1" in listed.stdout, listed.stdout + listed.stderr


# --- seed 004: datasets with template variables ----------------------------------------------

# Seed 004 lists its marketplace items after "# in marketplace" lines, with the indentation of
# their YAML lost; the walkthrough publishes them as a person would type them in from the seed:
# read from the seed when the test runs and indented again by where each key belongs.
_ITEM_SECTIONS = ("require:", "plugin:", "plugin_params:", "type:", "uri:")


def seed_004_items() -> dict[str, str]:
    """The seed's marketplace items, by name, in the seed's order, as YAML."""
    (path,) = SEEDS.glob("004_*.txt")
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    items: dict[str, str] = {}
    for at, line in enumerate(lines[:-1]):
        if line != "# in marketplace" or not lines[at + 1].startswith("- name: "):
            continue
        body = [lines[at + 1].removeprefix("- ")]
        for later in lines[at + 2 :]:
            if (
                not later
                or later.startswith("#")
                or (":" not in later and not later.startswith("- "))
            ):
                break  # the next comment, or the seed's prose
            body.append(later)
        items[body[0].removeprefix("name: ")] = _indented(body)
    return items


def _indented(body: list[str]) -> str:
    """An item's lines indented again: `require` entries with their template variables,
    `plugin_params` callbacks with their commands, and top-level lists."""
    out = [body[0]]
    section = under = ""
    for line in body[1:]:
        if line.startswith(_ITEM_SECTIONS) or (
            line.startswith("template_variables:") and section != "require"
        ):
            out.append(line)
            section, under = line.split(":", 1)[0], ""
        elif section == "require":
            if line.startswith("- "):
                out.append("  " + line)
            elif line.startswith("template_variables:"):
                out.append("    " + line)
                under = "variables"
            else:
                out.append(("      " if under == "variables" else "    ") + line)
        elif section == "plugin_params":
            if line.startswith("callbacks:"):
                out.append("  " + line)
            elif line.startswith("- event:"):
                out.append("    " + line)
            elif line.startswith("commands:"):
                out.append("      " + line)
                under = "commands"
            else:
                out.append(
                    ("        " if line.startswith("- ") and under == "commands" else "  ") + line
                )
        else:  # a top-level list (template_variables)
            out.append(("  " if line.startswith("- ") else "    ") + line)
    return "\n".join(out) + "\n"


SEED_004_IMAGE = "openpai/standard:python_3.6-pytorch_1.2.0-gpu"
# what the seed's job says of mnist, in its extras
SEED_004_REFERENCE = [
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
# stand-ins for what seed 004's image would hold and its download would give
SEED_004_SHIMS = {
    "apt": 'echo "apt stand-in: $*"\n',
    "wget": (
        'echo "wget stand-in: $*"\n'
        "for out; do :; done\n"
        '[ -d "$out" ] && out="$out/mnist.zip"\n'
        'echo "digits, the local copy" > "$out"\n'
    ),
    "unzip": 'echo "unzip stand-in: $*"\nls\n',
}


# Busybox's shell runs its own wget and unzip whatever PATH says: seed 004's image is built
# on the Debian base image, whose shell finds the stand-ins first.
DEBIAN_BASE = "paigraph/debian-base:local"


@pytest.fixture(scope="module")
def seed_004_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Seed 004's image name, built locally from the Debian base image and the stand-ins; a
    fixed name, so kept while another session uses it too (tests/shared_images.py)."""
    if subprocess.run(["docker", "image", "inspect", DEBIAN_BASE], capture_output=True).returncode:
        pytest.skip(f"needs {DEBIAN_BASE}: build it with ./scripts/build-base-image")
    context = tmp_path_factory.mktemp("seed-004-image")
    with images_in_use(
        "seed-004",
        [SEED_004_IMAGE],
        lambda: build(context, DEBIAN_BASE, SEED_004_SHIMS, "/usr/local/bin", [SEED_004_IMAGE]),
    ):
        yield SEED_004_IMAGE


def seed_004_job_runs(page: Any, steps: Steps, name: str) -> None:
    """The dataset job on its live page: succeeded, its dataset's callbacks in the log."""
    submit_and_reach(page, "SUCCEEDED")
    steps.shot(f"{name}-job-succeeded")
    log = instance_log(page, "taskrole", 0, "digits, the local copy")
    assert "apt stand-in: install -y wget" in log, log  # mnist's own requirement ran first
    assert "wget stand-in: http://1.2.3.4/mnist.zip -O /dataset/mnist" in log, log
    assert "unzip stand-in: mnist.zip" in log, log
    steps.shot(f"{name}-job-log")


def test_seed_004_items_published_verbatim_and_mnist_used_from_use_and_the_role_picker(
    site: Site, web_browser: Any, seed_004_image: str
) -> None:
    items = seed_004_items()
    assert list(items) == [
        "install_wget",
        "mnist",
        "confignfs_pvc",
        "imagenet",
        "imagenet_only_validation",
        "debug_hook",
    ]
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        steps = Steps(page, "walkthrough-004")
        for name, item in items.items():
            page.goto("/")
            page.get_by_role("link", name="Marketplace").click()
            page.get_by_role("link", name="Publish").click()
            page.fill("#content", item)
            page.get_by_role("button", name="Publish").click()
            page.wait_for_url(re.compile(r"/marketplace/(?!publish)[^/?]+$"))
            expect(page.get_by_test_id("content")).to_have_text(item)  # kept as written
            steps.shot(f"published-{name}")

        # "Use" on the dataset: its template variable asked for, then an empty job using it
        page.goto("/marketplace")
        page.locator("li[data-item=mnist]").get_by_role("link", name="mnist").click()
        field = page.get_by_label("Template variable dataPath")
        expect(field).to_have_value("")  # the seed declares no default: each use gives one
        expect(page.get_by_role("button", name="Use in a new job")).to_be_disabled()
        field.fill("/dataset/mnist")
        steps.shot("use-mnist-with-its-variable")
        page.get_by_role("link", name="Use in a new job").click()
        role = page.locator("[data-role-form=taskrole]")
        expect(role.get_by_label("Template variable dataPath of mnist")).to_have_value(
            "/dataset/mnist"
        )
        made = yaml.safe_load(editor_text(page))
        assert made["taskRoles"]["taskrole"]["prerequisites"] == ["mnist"]
        assert made["extras"]["reference_prerequisites"] == SEED_004_REFERENCE
        page.locator("[data-prereq-type=dockerimage] input[name=prereq-uri]").fill(seed_004_image)
        role.get_by_label("Command 1").fill("sleep 0s")  # the seed's job's command
        role.get_by_role("button", name="Add command").click()
        role.get_by_label("Command 2").fill("cat /dataset/mnist/mnist.zip")
        no_problems(page)
        steps.shot("use-job-in-the-forms")
        # the preview shows the dataset's commands with the value given
        expect(open_preview(page)).to_contain_text(
            "wget http://1.2.3.4/mnist.zip -O /dataset/mnist"
        )
        steps.shot("use-job-preview")
        seed_004_job_runs(page, steps, "use")

        # the role's data picker on a new job, the variable given in the picker
        open_submit_page(page)
        role = start_empty_job(page, seed_004_image, "docker_image_0")
        # the seed writes mnist without a type: a plugin, picked among the role's prerequisites
        role.get_by_role(
            "button", name="Pick a plugin (a dataset or hook) from the marketplace"
        ).click()
        picker = role.locator("[data-picker=PLUGIN]")
        picker.get_by_label("Search a plugin (a dataset or hook)").fill("mnist")
        picker.get_by_role("button", name="Use mnist").click()
        picker.get_by_label("Template variable dataPath").fill("/dataset/mnist")
        steps.shot("picker-with-the-variable")
        picker.get_by_role("button", name="Add mnist with these values").click()
        made = yaml.safe_load(editor_text(page))
        assert made["taskRoles"]["taskrole"]["prerequisites"] == ["mnist"]
        assert made["extras"]["reference_prerequisites"] == SEED_004_REFERENCE
        role.get_by_role("button", name="Add command").click()
        role.get_by_label("Command 1").fill("cat /dataset/mnist/mnist.zip")
        no_problems(page)
        steps.shot("picker-job-in-the-forms")
        seed_004_job_runs(page, steps, "picker")
