"""The PAI_* environment of a task instance: names, formats, order, and the sourceable file."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from backends.base import LaunchRequest, Placement, PortRequest, ResourceRequest, RoleLaunch
from backends.runtime_env import port_requests, runtime_env, shell_env_file
from tests.corpus import CORPUS, SEEDS

BUSYBOX = "/usr/bin/busybox"
FRAMEWORK = CORPUS / "fragments" / "openpai-runtime__test__framework.json"

PORT_LIST = re.compile(r"^\d+(,\d+)*$")
HOST_PORT_LIST = re.compile(r"^([A-Za-z0-9._~]+:\d+(,\d+)*;)+$")
HOST_LIST = re.compile(r"^\d+\.\d+\.\d+\.\d+:\d+(,\d+\.\d+\.\d+\.\d+:\d+)*$")
RESOURCE = re.compile(r"^\d+,\d+,\d+,\d+$")


def role(name: str, instances: int = 1, ports: dict[str, int] | None = None, **kw) -> RoleLaunch:
    resources = kw.pop("resources", None) or ResourceRequest(
        cpu=2,
        memory_mb=1024,
        gpu=0,
        shm_mb=64,
        ports=[PortRequest(label=label, count=n) for label, n in (ports or {}).items()],
    )
    return RoleLaunch(
        name=name,
        instances=instances,
        image="paigraph/busybox:test",
        resources=resources,
        commands=["true"],
        **kw,
    )


def place(request: LaunchRequest, first_port: int = 20000) -> dict[tuple[str, int], Placement]:
    """Consecutive ports for every label of every instance; instance n of the job on 10.0.0.n+2."""
    placements: dict[tuple[str, int], Placement] = {}
    port, n = first_port, 2
    for r in request.roles:
        for index in range(r.instances):
            ports: dict[str, list[int]] = {}
            for want in port_requests(r):
                ports[want.label] = list(range(port, port + want.count))
                port += want.count
            placements[(r.name, index)] = Placement(
                node="node-0", host_ip=f"10.0.0.{n}", ports=ports
            )
            n += 1
    return placements


def multi_role_job() -> LaunchRequest:
    return LaunchRequest(
        job_id="j1",
        job_name="mnist_dist",
        user="alice",
        virtual_cluster="research",
        roles=[
            role("ps_server", 1, {"model_server": 1}, min_succeeded=-1),
            role("Worker", 3, {"tcp": 3, "grpc": 2}, min_failed=2, min_succeeded=3),
            role("chief", 1, {"ssh": 2, "jupyter": 1}, min_succeeded=1),
        ],
        env={"PAI_DATA_DIR": "/data/mnist", "PAI_OUTPUT_DIR": "/out", "PAI_CODE_DIR": "/code"},
    )


# --- formats, for every instance of a job with several roles, labels and port counts ---------


def test_every_variable_has_its_documented_format_in_every_instance() -> None:
    request = multi_role_job()
    placements = place(request)
    for r in request.roles:
        for index in range(r.instances):
            env = runtime_env(request, placements, r.name, index)
            mine = placements[(r.name, index)]
            labels = [p.label for p in port_requests(r)]

            assert env["PAI_CURRENT_TASK_ROLE_NAME"] == r.name
            assert env["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"] == str(index)
            assert env["PAI_TASK_INDEX"] == str(index)
            assert env["PAI_CONTAINER_HOST_IP"] == env["PAI_CURRENT_CONTAINER_IP"] == mine.host_ip
            http, ssh = str(mine.ports["http"][0]), str(mine.ports["ssh"][0])
            assert env["PAI_CONTAINER_HOST_PORT"] == env["PAI_CURRENT_CONTAINER_PORT"] == http
            assert env["PAI_CONTAINER_SSH_PORT"] == ssh

            port_list = env["PAI_CONTAINER_HOST_PORT_LIST"]
            assert HOST_PORT_LIST.match(port_list), port_list
            pairs = [item.split(":") for item in port_list.rstrip(";").split(";")]
            assert [label for label, _ in pairs] == labels
            for label, ports in pairs:
                assert ports == ",".join(map(str, mine.ports[label]))
                assert env[f"PAI_CONTAINER_HOST_{label}_PORT_LIST"] == ports

            for other in request.roles:
                assert RESOURCE.match(env[f"PAI_RESOURCE_{other.name}"])
                assert env[f"PAI_TASK_ROLE_TASK_COUNT_{other.name}"] == str(other.instances)
                hosts = env[f"PAI_TASK_ROLE_{other.name}_HOST_LIST"]
                assert HOST_LIST.match(hosts), hosts
                for i in range(other.instances):
                    peer = placements[(other.name, i)]
                    assert env[f"PAI_HOST_IP_{other.name}_{i}"] == peer.host_ip
                    for want in port_requests(other):
                        value = env[f"PAI_PORT_LIST_{other.name}_{i}_{want.label}"]
                        assert PORT_LIST.match(value)
                        assert len(value.split(",")) == want.count
                        assert env[f"PAI_{other.name}_{i}_{want.label}_PORT"] == value


def test_port_labels_are_the_roles_own_then_ssh_and_http() -> None:
    request = multi_role_job()
    env = runtime_env(request, place(request), "Worker", 1)
    labels = [item.split(":")[0] for item in env["PAI_CONTAINER_HOST_PORT_LIST"].split(";") if item]
    assert labels == ["tcp", "grpc", "ssh", "http"]
    # chief names ssh itself (two ports): it keeps its count, and the first one is the ssh port
    chief = runtime_env(request, place(request), "chief", 0)
    ssh_ports = chief["PAI_CONTAINER_HOST_ssh_PORT_LIST"].split(",")
    assert len(ssh_ports) == 2
    assert chief["PAI_CONTAINER_SSH_PORT"] == ssh_ports[0]
    assert chief["PAI_CONTAINER_HOST_PORT_LIST"].startswith("ssh:")


@pytest.mark.shared("corpus")
def test_exact_values_for_a_small_job() -> None:
    request = LaunchRequest(
        job_id="j2",
        job_name="tiny",
        user="bob",
        roles=[
            role("ps", 1, resources=ResourceRequest(cpu=1, memory_mb=256, gpu=0, shm_mb=32)),
            role(
                "worker",
                2,
                resources=ResourceRequest(
                    cpu=2, memory_mb=512, gpu=1, shm_mb=64, ports=[PortRequest(label="g", count=2)]
                ),
                min_failed=-1,
                min_succeeded=1,
            ),
        ],
    )
    placements = {
        ("ps", 0): Placement(
            node="n1", host_ip="172.18.0.2", ports={"ssh": [15001], "http": [15002]}
        ),
        ("worker", 0): Placement(
            node="n1",
            host_ip="172.18.0.3",
            ports={"g": [15010, 15011], "ssh": [15012], "http": [15013]},
        ),
        ("worker", 1): Placement(
            node="n2",
            host_ip="172.18.0.4",
            ports={"g": [15020, 15021], "ssh": [15022], "http": [15023]},
        ),
    }
    env = runtime_env(request, placements, "worker", 1)
    expected = {
        "PAI_FRAMEWORK_NAME": "bob~tiny",
        "PAI_JOB_NAME": "tiny",
        "PAI_USER_NAME": "bob",
        "PAI_USERNAME": "bob",
        "PAI_DEFAULT_FS_URI": "",
        "PAI_VIRTUAL_CLUSTER": "default",
        "PAI_JOB_VC_NAME": "default",
        "PAI_TASK_ROLE_COUNT": "2",
        "PAI_TASK_ROLES_NUM": "2",
        "PAI_JOB_TASK_ROLE_COUNT": "2",
        "PAI_TASK_ROLE_LIST": "ps,worker",
        "PAI_JOB_TASK_ROLE_LIST": "ps,worker",
        "PAI_TASKS_NUM": "3",
        "PAI_JOB_TASK_COUNT": "3",
        "PAI_TASK_ROLE_TASK_COUNT_ps": "1",
        "PAI_TASK_ROLE_TASK_COUNT_worker": "2",
        "PAI_RESOURCE_ps": "0,1,256,32",
        "PAI_RESOURCE_worker": "1,2,512,64",
        "PAI_MIN_FAILED_TASK_COUNT_ps": "1",
        "PAI_MIN_SUCCEEDED_TASK_COUNT_ps": "-1",
        "PAI_MIN_FAILED_TASK_COUNT_worker": "-1",
        "PAI_MIN_SUCCEEDED_TASK_COUNT_worker": "1",
        "PAI_CURRENT_TASK_ROLE_NAME": "worker",
        "PAI_TASK_ROLE_NAME": "worker",
        "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": "1",
        "PAI_TASK_INDEX": "1",
        "PAI_TASK_ROLE_INDEX": "1",
        "PAI_TASK_ROLE_NO": "1",
        "PAI_CURRENT_TASK_ROLE_TASK_COUNT": "2",
        "PAI_TASK_ROLE_NUM": "2",
        "PAI_CURRENT_TASK_ROLE_CPU_COUNT": "2",
        "PAI_TASK_CPU_NUM": "2",
        "PAI_CURRENT_TASK_ROLE_MEM_MB": "512",
        "PAI_TASK_MEM_MB": "512",
        "PAI_CURRENT_TASK_ROLE_GPU_COUNT": "1",
        "PAI_TASK_GPU_NUM": "1",
        "PAI_CURRENT_TASK_ROLE_SHM_MB": "64",
        "PAI_CURRENT_TASK_ROLE_MIN_FAILED_TASK_COUNT": "-1",
        "PAI_CURRENT_TASK_ROLE_MIN_SUCCEEDED_TASK_COUNT": "1",
        "PAI_HOST_IP_ps_0": "172.18.0.2",
        "PAI_HOST_IP_worker_0": "172.18.0.3",
        "PAI_HOST_IP_worker_1": "172.18.0.4",
        "PAI_PORT_LIST_ps_0_ssh": "15001",
        "PAI_PORT_LIST_ps_0_http": "15002",
        "PAI_PORT_LIST_worker_0_g": "15010,15011",
        "PAI_PORT_LIST_worker_0_ssh": "15012",
        "PAI_PORT_LIST_worker_0_http": "15013",
        "PAI_PORT_LIST_worker_1_g": "15020,15021",
        "PAI_PORT_LIST_worker_1_ssh": "15022",
        "PAI_PORT_LIST_worker_1_http": "15023",
        "PAI_ps_0_ssh_PORT": "15001",
        "PAI_ps_0_http_PORT": "15002",
        "PAI_worker_0_g_PORT": "15010,15011",
        "PAI_worker_0_ssh_PORT": "15012",
        "PAI_worker_0_http_PORT": "15013",
        "PAI_worker_1_g_PORT": "15020,15021",
        "PAI_worker_1_ssh_PORT": "15022",
        "PAI_worker_1_http_PORT": "15023",
        "PAI_CURRENT_CONTAINER_IP": "172.18.0.4",
        "PAI_CONTAINER_HOST_IP": "172.18.0.4",
        "PAI_CURRENT_CONTAINER_PORT": "15023",
        "PAI_CONTAINER_HOST_PORT": "15023",
        "PAI_CONTAINER_SSH_PORT": "15022",
        "PAI_CONTAINER_HOST_g_PORT_LIST": "15020,15021",
        "PAI_CONTAINER_HOST_ssh_PORT_LIST": "15022",
        "PAI_CONTAINER_HOST_http_PORT_LIST": "15023",
        "PAI_CONTAINER_HOST_PORT_LIST": "g:15020,15021;ssh:15022;http:15023;",
        "PAI_TASK_ROLE_ps_HOST_LIST": "172.18.0.2:15002",
        "PAI_TASK_ROLE_worker_HOST_LIST": "172.18.0.3:15013,172.18.0.4:15023",
        "PAI_TASK_ROLE_INSTANCES": "ps:0,worker:0,worker:1",
        "PAI_WORK_DIR": "/work",
    }
    assert env == expected


def test_host_list_follows_the_index_not_the_address_or_the_mapping_order() -> None:
    request = LaunchRequest(job_id="j", job_name="order", roles=[role("worker", 4)])
    ips = ["10.0.0.9", "10.0.0.3", "10.0.0.7", "10.0.0.1"]
    placements = {
        ("worker", i): Placement(
            node="n", host_ip=ips[i], ports={"ssh": [16000 + i], "http": [17000 + i]}
        )
        for i in reversed(range(4))
    }
    env = runtime_env(request, placements, "worker", 2)
    assert env["PAI_TASK_ROLE_worker_HOST_LIST"] == (
        "10.0.0.9:17000,10.0.0.3:17001,10.0.0.7:17002,10.0.0.1:17003"
    )
    assert env["PAI_TASK_ROLE_INSTANCES"] == "worker:0,worker:1,worker:2,worker:3"


def test_role_names_are_kept_exactly_as_written() -> None:
    request = LaunchRequest(
        job_id="j", job_name="names", roles=[role("Ps_Server", 1), role("worker_A", 2, {"Main": 1})]
    )
    env = runtime_env(request, place(request), "worker_A", 0)
    assert env["PAI_TASK_ROLE_LIST"] == "Ps_Server,worker_A"
    assert env["PAI_CURRENT_TASK_ROLE_NAME"] == "worker_A"
    for key in (
        "PAI_TASK_ROLE_Ps_Server_HOST_LIST",
        "PAI_HOST_IP_Ps_Server_0",
        "PAI_PORT_LIST_worker_A_1_Main",
        "PAI_worker_A_1_Main_PORT",
        "PAI_CONTAINER_HOST_Main_PORT_LIST",
        "PAI_RESOURCE_worker_A",
    ):
        assert key in env
    assert not [k for k in env if "psserver" in k.lower() or "workera" in k.lower()]


@pytest.mark.shared("corpus")
def test_runtime_family_has_the_shape_of_the_openpai_runtime_example() -> None:
    """The roles, addresses and port counts of runtime_env.md §7, with ports of our own."""
    framework = json.loads(FRAMEWORK.read_text())
    roles, placements, port = [], {}, 21000
    for spec, status in zip(
        framework["spec"]["taskRoles"],
        framework["status"]["attemptStatus"]["taskRoleStatuses"],
        strict=True,
    ):
        annotations = spec["task"]["pod"]["metadata"]["annotations"]
        counts = json.loads(annotations["rest-server/port-scheduling-spec"])["ports"]
        user = {label: c["count"] for label, c in counts.items() if label not in ("ssh", "http")}
        roles.append(role(status["name"], len(status["taskStatuses"]), user))
        for task in status["taskStatuses"]:
            ports = {}
            for label, c in counts.items():
                ports[label] = list(range(port, port + c["count"]))
                port += c["count"]
            ip = task["attemptStatus"]["podHostIP"]
            placements[(status["name"], task["index"])] = Placement(
                node=ip, host_ip=ip, ports=ports
            )
    request = LaunchRequest(job_id="t", job_name="test", user="test_user", roles=roles)

    text = shell_env_file(runtime_env(request, placements, "taskrole", 0))

    expected = """\
export PAI_PORT_LIST_taskrole_0_tcp='21000,21001,21002'
export PAI_taskrole_0_tcp_PORT='21000,21001,21002'
export PAI_PORT_LIST_taskrole_0_udp='21003,21004,21005'
export PAI_taskrole_0_udp_PORT='21003,21004,21005'
export PAI_PORT_LIST_taskrole_0_ssh='21006'
export PAI_taskrole_0_ssh_PORT='21006'
export PAI_PORT_LIST_taskrole_0_http='21007'
export PAI_taskrole_0_http_PORT='21007'
export PAI_HOST_IP_taskrole_0='10.151.41.8'
export PAI_CURRENT_CONTAINER_IP='10.151.41.8'
export PAI_CURRENT_CONTAINER_PORT='21007'
export PAI_CONTAINER_HOST_IP='10.151.41.8'
export PAI_CONTAINER_HOST_PORT='21007'
export PAI_CONTAINER_SSH_PORT='21006'
export PAI_CONTAINER_HOST_tcp_PORT_LIST='21000,21001,21002'
export PAI_CONTAINER_HOST_udp_PORT_LIST='21003,21004,21005'
export PAI_CONTAINER_HOST_ssh_PORT_LIST='21006'
export PAI_CONTAINER_HOST_http_PORT_LIST='21007'
export PAI_CONTAINER_HOST_PORT_LIST='tcp:21000,21001,21002;udp:21003,21004,21005;ssh:21006;http:21007;'
export PAI_TASK_ROLE_taskrole_HOST_LIST='10.151.41.8:21007'
export PAI_PORT_LIST_taskrole1_0_mpi='21008,21009'
export PAI_taskrole1_0_mpi_PORT='21008,21009'
export PAI_PORT_LIST_taskrole1_0_tensorflow='21010'
export PAI_taskrole1_0_tensorflow_PORT='21010'
export PAI_PORT_LIST_taskrole1_0_ssh='21011'
export PAI_taskrole1_0_ssh_PORT='21011'
export PAI_PORT_LIST_taskrole1_0_http='21012'
export PAI_taskrole1_0_http_PORT='21012'
export PAI_HOST_IP_taskrole1_0='10.151.41.9'
export PAI_TASK_ROLE_taskrole1_HOST_LIST='10.151.41.9:21012'
export PAI_TASK_ROLE_INSTANCES='taskrole:0,taskrole1:0'
"""  # noqa: E501
    assert expected in text


@pytest.mark.shared("corpus")
def test_job_variables_match_those_openpai_gives_the_container() -> None:
    """Names, order and values of the rest-server's env of the example's app container."""
    framework = json.loads(FRAMEWORK.read_text())
    spec = framework["spec"]["taskRoles"][0]
    app = next(c for c in spec["task"]["pod"]["spec"]["containers"] if c["name"] == "app")
    theirs = {e["name"]: e.get("value", "") for e in app["env"] if "valueFrom" not in e}
    names = theirs["PAI_TASK_ROLE_LIST"].split(",")
    ours_roles = [
        role(name, 1, resources=ResourceRequest(cpu=4, memory_mb=8192, gpu=1, shm_mb=0))
        for name in names
    ]
    request = LaunchRequest(job_id="t", job_name="test", user="test_user", roles=ours_roles)
    env = runtime_env(request, place(request), spec["name"], 0)

    index_vars = ["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX", "PAI_TASK_INDEX"]
    their_order = [e["name"] for e in app["env"]]
    assert [k for k in env if k in their_order] == their_order
    assert [env[k] for k in index_vars] == ["0", "0"]
    # PAI_JOB_NAME is the job's own name here (seeds, user docs); OpenPAI's user~job is kept in
    # PAI_FRAMEWORK_NAME.
    assert env["PAI_JOB_NAME"] == "test"
    assert theirs.pop("PAI_JOB_NAME") == env["PAI_FRAMEWORK_NAME"] == "test_user~test"
    assert {k: env[k] for k in theirs} == theirs


def seed_table_names(prefix: str) -> list[str]:
    (path,) = SEEDS.glob(f"{prefix}_*.txt")
    rows = re.findall(r"^\| (PAI_\S+)", path.read_text(encoding="utf-8"), re.MULTILINE)
    return [name.replace("\\", "").replace("`", "") for name in rows]


@pytest.mark.shared("seeds")
@pytest.mark.parametrize("seed", ["000", "003"])
def test_every_variable_of_the_seed_tables_is_set(seed: str) -> None:
    names = seed_table_names(seed)
    assert len(names) >= 20
    request = multi_role_job()
    env = runtime_env(request, place(request), "ps_server", 0)
    for name in names:
        concrete = name.replace("$type", "model_server").replace("$name", "Worker")
        assert concrete in env, f"{name} from seed {seed}"


def test_job_and_role_env_come_last_and_the_role_wins() -> None:
    base = multi_role_job()
    worker = base.roles[1].model_copy(update={"env": {"SHARED": "role", "ONLY_ROLE": "r"}})
    request = base.model_copy(
        update={
            "roles": [base.roles[0], worker, base.roles[2]],
            "env": {**base.env, "SHARED": "job", "LR": "0.1"},
        }
    )
    env = runtime_env(request, place(request), "Worker", 0, work_dir="/job")
    keys = list(env)
    assert env["PAI_WORK_DIR"] == "/job"
    assert keys.index("PAI_WORK_DIR") < keys.index("PAI_DATA_DIR") < keys.index("ONLY_ROLE")
    assert env["PAI_DATA_DIR"] == "/data/mnist"
    assert env["PAI_OUTPUT_DIR"] == "/out"
    assert env["PAI_CODE_DIR"] == "/code"
    assert (env["SHARED"], env["LR"], env["ONLY_ROLE"]) == ("role", "0.1", "r")
    other = runtime_env(request, place(request), "chief", 0)
    assert other["SHARED"] == "job"
    assert "ONLY_ROLE" not in other


@pytest.mark.parametrize(
    ("role_name", "index", "placements_change", "message"),
    [
        ("nope", 0, None, "no task role 'nope'"),
        ("Worker", 3, None, "no index 3"),
        ("Worker", 0, ("drop", ("Worker", 2)), "no placement for instance Worker-2"),
        (
            "Worker",
            0,
            ("no_http", ("chief", 0)),
            "placement of chief-0 has no ports for label 'http'",
        ),
        (
            "Worker",
            0,
            ("short", ("Worker", 1)),
            "has 2 port(s) for label 'tcp', the role asks for 3",
        ),
    ],
)
def test_inconsistent_input_is_refused_with_a_clear_message(
    role_name: str, index: int, placements_change: tuple | None, message: str
) -> None:
    request = multi_role_job()
    placements = place(request)
    if placements_change:
        change, key = placements_change
        if change == "drop":
            del placements[key]
        else:
            ports = dict(placements[key].ports)
            if change == "no_http":
                del ports["http"]
            else:
                ports["tcp"] = ports["tcp"][:2]
            placements[key] = placements[key].model_copy(update={"ports": ports})
    with pytest.raises(ValueError, match=re.escape(message)):
        runtime_env(request, placements, role_name, index)


# --- the sourceable file -----------------------------------------------------------------------


def source_and_print(tmp_path: Path, text: str, *names: str) -> list[str]:
    env_file = tmp_path / "runtime_env.sh"
    env_file.write_text(text)
    out = []
    for name in names:
        result = subprocess.run(
            [BUSYBOX, "sh", "-c", f". {env_file} && printenv {name}"],
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            check=True,
        )
        out.append(result.stdout.decode())
    return out


NASTY = {
    "QUOTE": "it's",
    "QUOTES": "''' \"\" '\\''",
    "LINES": "first line\nsecond 'line'\n\nlast",
    "EXPANSIONS": "$HOME ${PATH} $(echo no) `echo no` $((1+1)) \\n \\",
    "GLOB": "* ? [a-z] ~",
    "SPACES": "  leading and trailing  ",
    "SEMICOLONS": "label:1,2;ssh:3;",
    "EMPTY": "",
    "UNICODE": "größe ✓",
    "TRAILING_NEWLINE": "value\n",
}


def test_shell_env_file_round_trips_nasty_values_through_busybox(tmp_path: Path) -> None:
    printed = source_and_print(tmp_path, shell_env_file(NASTY), *NASTY)
    assert printed == [value + "\n" for value in NASTY.values()]


def test_names_a_shell_cannot_export_are_in_the_env_but_commented_out_in_the_file(
    tmp_path: Path,
) -> None:
    request = LaunchRequest(
        job_id="j",
        job_name="dash",
        roles=[role("ps-server", 1), role("worker", 1, {"a.b": 1})],
    )
    env = runtime_env(request, place(request), "worker", 0)
    assert env["PAI_TASK_ROLE_ps-server_HOST_LIST"].startswith(env["PAI_HOST_IP_ps-server_0"])
    assert "PAI_CONTAINER_HOST_a.b_PORT_LIST" in env

    text = shell_env_file(env)
    assert "# not exported, not a shell variable name: PAI_TASK_ROLE_ps-server_HOST_LIST" in text
    assert "# not exported, not a shell variable name: PAI_CONTAINER_HOST_a.b_PORT_LIST" in text
    assert not re.search(r"^export \S*(-|\.)\S*=", text, re.MULTILINE)
    printed = source_and_print(
        tmp_path, text, "PAI_TASK_ROLE_worker_HOST_LIST", "PAI_TASK_ROLE_LIST"
    )
    assert printed == [env["PAI_TASK_ROLE_worker_HOST_LIST"] + "\n", "ps-server,worker\n"]


def test_every_line_of_the_file_is_an_export_or_a_comment() -> None:
    request = multi_role_job()
    env = runtime_env(request, place(request), "Worker", 2)
    lines = shell_env_file(env).splitlines()
    assert all(line.startswith(("export ", "# ")) for line in lines)
    exported = [line.split("=", 1)[0].removeprefix("export ") for line in lines[1:]]
    assert exported == list(env)


def test_a_nul_byte_is_refused() -> None:
    with pytest.raises(ValueError, match="'BAD' contains a NUL byte"):
        shell_env_file({"BAD": "a\0b"})
