"""GPU figures as `nvidia-smi --query-gpu=index,utilization.gpu,memory.used
--format=csv,noheader,nounits` prints them (tests/data/nvidia_smi_query.txt holds output in
its format, one GPU without a utilization figure), turned into each instance's figures."""

from __future__ import annotations

from pathlib import Path

from backends.nvidia_smi import GpuUse, instance_gpu_use, parse_query, query_gpus

RECORDED = (Path(__file__).parents[1] / "data" / "nvidia_smi_query.txt").read_text()
MIB = 1 << 20


def test_each_gpu_is_read_and_one_without_a_figure_is_left_out() -> None:
    gpus = parse_query(RECORDED)

    assert gpus == {
        0: GpuUse(0, 0.97, 30511 * MIB),
        1: GpuUse(1, 0.0, 4 * MIB),
        3: GpuUse(3, 0.43, 12288 * MIB),
    }


def test_an_instance_gets_the_mean_utilization_and_the_summed_memory_of_its_gpus() -> None:
    gpus = parse_query(RECORDED)

    utilization, memory = instance_gpu_use(gpus, (0, 1))
    assert utilization is not None and abs(utilization - 0.485) < 1e-9
    assert memory == (30511 + 4) * MIB
    # a GPU without figures does not count as idle
    assert instance_gpu_use(gpus, (2, 3)) == (0.43, 12288 * MIB)
    assert instance_gpu_use(gpus, (2,)) == (None, None)


def test_warnings_and_blank_lines_around_the_figures_are_ignored() -> None:
    noisy = "WARNING: infoROM is corrupted at gpu 0000:65:00.0\n\n" + RECORDED + "\n"

    assert parse_query(noisy) == parse_query(RECORDED)
    assert parse_query("") == {}


def test_a_host_without_nvidia_smi_has_no_figures() -> None:
    assert query_gpus("nvidia-smi-that-is-not-installed") == {}
