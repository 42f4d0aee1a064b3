"""What instances use, on the web UI in headless chromium against a real `paigraph serve` on
the Docker simulator: a container that burns one core and holds about 200 MB shows about that
on its job page (per task role and per instance, live, with its request and limit, as CSV), and
the cluster page shows each node's allocation and use as far as the viewer may see."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser_support import Site, browser_page, screenshot
from tests.simulated import IMAGE
from tests.waiting import until

pytestmark = [pytest.mark.browser, pytest.mark.docker]

MIB = 1024 * 1024
HELD_MB = 200
# 200 MB written into the container's /dev/shm (a tmpfs charged to its memory), then a busy
# loop on one core until the job is stopped
BURNER = (
    f"dd if=/dev/zero of=/dev/shm/held bs=1M count={HELD_MB} 2>/dev/null && while :; do :; done"
)


def burner_config() -> str:
    return json.dumps(
        {
            "protocolVersion": 2,
            "name": "burner",
            "type": "job",
            "prerequisites": [{"name": "bb", "type": "dockerimage", "uri": IMAGE}],
            "taskRoles": {
                "main": {
                    "instances": 1,
                    "dockerImage": "bb",
                    "resourcePerInstance": {"cpu": 1, "memoryMB": 1024, "gpu": 1},
                    "extraContainerOptions": {"shmMB": 512},
                    "commands": [BURNER],
                }
            },
        }
    )


@pytest.fixture(scope="module")
def burner(site: Site) -> Iterator[str]:
    """alice's running burner job, stopped at the end of the module."""
    api = site.api(site.alice)
    job_id = api.submit(burner_config())
    api.wait(job_id, lambda job: job["state"] == "RUNNING")
    yield job_id
    api("mutation($id: ID!) { stopJob(input: {id: $id}) { errors { message } } }", id=job_id)


def amount(text: str) -> float:
    """A figure as the page writes it ("0.98 cores", "200.8 MiB", "1.00 GiB") in cores or MiB."""
    found = re.search(r"([\d.]+) (cores|B|KiB|MiB|GiB)", text)
    assert found, f"no figure in {text!r}"
    value, unit = float(found.group(1)), found.group(2)
    return value * {"cores": 1, "B": 1 / MIB, "KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[unit]


def figure(page: Any, chart: Any, line: str) -> float | None:
    """The latest figure of a chart's line, from its legend; None while it has none."""
    text = chart.locator(f"[data-line='{line}'] .figure").inner_text()
    return None if text == "—" else amount(text)


def test_a_burning_container_shows_its_core_and_memory_on_the_job_page(
    site: Site, web_browser: Any, burner: str
) -> None:
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto(f"/jobs/{burner}")
        role = page.locator("[data-metrics-role=main]")
        cpu = role.get_by_test_id("chart-cpu")
        memory = role.get_by_test_id("chart-memory")
        cpu.wait_for()
        # the request is drawn from the start; the job asks 1 core and 1024 MB
        assert figure(page, cpu, "requested (sum)") == pytest.approx(1.0)
        assert figure(page, memory, "requested (sum)") == pytest.approx(1024, abs=1)

        # generous bounds: the machine's cores are shared with other work
        def held() -> float | None:
            used = figure(page, memory, "used (sum)")
            return used if used is not None and 0.8 * HELD_MB <= used <= 1.6 * HELD_MB else None

        until(held, "about 200 MB shown as the role's memory", timeout=90)
        until(
            lambda: (used := figure(page, cpu, "used (sum)")) is not None and 0.25 <= used <= 1.3,
            "about one core shown as the role's CPU",
            timeout=90,
        )
        assert (
            "GPUs of main: no utilization measured" in page.get_by_test_id("gpu-note").inner_text()
        )
        source = page.get_by_test_id("metrics-source").inner_text()
        assert source.startswith("Measured: ") and len(source) > len("Measured: ")

        # live: more points arrive while the page is open, without a reload
        points = int(memory.get_attribute("data-points") or 0)
        until(
            lambda: int(memory.get_attribute("data-points") or 0) > points,
            "a live round appended to the memory chart",
            timeout=60,
        )
        screenshot(page, "job-metrics")

        # the shown series as CSV: the used memory column holds about 200 MB
        with page.expect_download() as download:
            memory.get_by_role("button", name="CSV").click()
        assert download.value.suggested_filename == "burner-main-memory.csv"
        rows = download.value.path().read_text().splitlines()
        assert rows[0] == (
            "time,used (sum) [bytes],least one instance [bytes],most one instance [bytes],"
            "requested (sum) [bytes]"
        )
        last = rows[-1].split(",")
        assert 0.8 * HELD_MB <= float(last[1]) / MIB <= 1.6 * HELD_MB
        assert float(last[4]) == 1024 * MIB

        # one instance: its own figures with its request and memory limit
        page.get_by_test_id("metrics-of").select_option("main/0")
        one = page.locator("[data-metrics-instance='main/0']")
        one_memory = one.get_by_test_id("chart-memory")
        one_memory.wait_for()
        until(
            lambda: (
                (used := figure(page, one_memory, "used")) is not None
                and 0.8 * HELD_MB <= used <= 1.6 * HELD_MB
            ),
            "about 200 MB shown as the instance's memory",
        )
        assert figure(page, one_memory, "requested") == pytest.approx(1024, abs=1)
        # its GPU is simulated: the page says why it has no GPU figures
        note = page.get_by_test_id("gpu-note")
        assert note.inner_text() == "GPUs: simulated: no utilization"
        limit = figure(page, one_memory, "limit")
        assert limit is not None and 0 < limit <= 1024
        screenshot(page, "instance-metrics")


def test_the_cluster_page_shows_each_nodes_allocation_and_use(
    site: Site, web_browser: Any, burner: str
) -> None:
    with browser_page(web_browser, site.url, site.root) as (page, _):
        page.goto("/cluster")
        usage = page.get_by_test_id("node-usage")
        usage.locator("tbody tr").first.wait_for()
        assert usage.locator("tbody tr").count() == 4  # an admin sees every simulated node
        rows = [usage.locator("tbody tr").nth(n) for n in range(4)]

        def instance_counts() -> list[str]:
            return [row.locator("td").last.inner_text() for row in rows]

        def measured_once_more() -> bool:
            # the counts are of the instances the latest sampling round measured: a round
            # that missed the burner (a busy machine) shows it at the next read of the page
            if sorted(instance_counts()) == ["0", "0", "0", "1"]:
                return True
            page.reload()
            usage.locator("tbody tr").first.wait_for()
            return False

        until(measured_once_more, "one node running the burner's instance", timeout=60, every=2)
        cells = instance_counts()
        busy = rows[cells.index("1")]
        cpu = busy.locator("[data-bar=cpu] .figures").inner_text()
        assert re.search(r"1 of 32 allocated", cpu), cpu
        memory = busy.locator("[data-bar=memory] .figures").inner_text()
        assert amount(memory) >= 0.8 * HELD_MB, memory
        # the simulated nodes' GPUs are cells, the burner's one held, said to be simulated
        gpus = busy.get_by_test_id("gpu-cells")
        assert gpus.locator("[data-gpu]").count() == 8
        assert gpus.locator("[data-allocated='1']").count() == 1
        assert "(simulated: no utilization)" in gpus.inner_text()
        screenshot(page, "cluster-usage")

    # a user without jobs sees no node's use (the server decides)
    with browser_page(web_browser, site.url, site.bob) as (page, _):
        page.goto("/cluster")
        page.get_by_test_id("node-usage").get_by_text("No node to show.").wait_for()
