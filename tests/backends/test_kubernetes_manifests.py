"""The Kubernetes objects of a job attempt: valid for the pinned Kubernetes version, and saying
what users rely on (hostnames, environment, resources, owners, labels, secrets)."""

from __future__ import annotations

import base64
import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from backends.base import (
    Fetch,
    LaunchRefused,
    LaunchRequest,
    Material,
    StorageMount,
)
from backends.entrypoint import entrypoint_script
from backends.kubernetes_manifests import (
    AttemptBuilder,
    AttemptObjects,
    with_owner,
    yaml_stream,
)
from backends.kubernetes_names import dns_label, label_value, role_hosts
from backends.kubernetes_ports import hashed_port
from backends.kubernetes_settings import KubernetesSettings, PortRange, SettingsError, load_settings
from backends.runtime_env import runtime_env
from server.cli.main import app
from server.jobs.launch import NotRunnable, launch_request
from server.protocol import Kind, resolve_job
from tests.corpus import CORPUS
from tests.fake_kube_api import validate
from tests.jobs import V2_JOB
from tests.waiting import until

SETTINGS = KubernetesSettings(state_dir=Path("/nonexistent"))


def request_of(
    doc: dict[str, Any] | str | bytes, job_id: str = "tf_dist-0a1b2c3d"
) -> LaunchRequest:
    text = json.dumps(doc) if isinstance(doc, dict) else doc
    result = resolve_job(text, {})
    assert result.spec is not None, result.errors
    return launch_request(result.spec, job_id=job_id)


def build(request: LaunchRequest, **settings: Any) -> AttemptObjects:
    chosen = SETTINGS.model_copy(update=settings) if settings else SETTINGS
    return AttemptBuilder(request, chosen, "jobs").objects()


def by_name(objects: AttemptObjects) -> dict[str, dict[str, Any]]:
    return {p["spec"]["hostname"]: p for p in objects.pods}


def main(pod: dict[str, Any]) -> dict[str, Any]:
    (container,) = pod["spec"]["containers"]
    return container


def config_files(objects: AttemptObjects, pod: dict[str, Any]) -> dict[str, str]:
    """The files of the pod's runtime-config volume, as the kubelet projects them: items of
    the attempt's ConfigMaps, and annotations of the pod through the downward API."""
    maps = {
        m["metadata"]["name"]: m["data"] for m in [objects.config_map, *objects.extra_config_maps]
    }
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "runtime-config"]
    files = {}
    for source in volume["projected"]["sources"]:
        if "configMap" in source:
            data = maps[source["configMap"]["name"]]
            for item in source["configMap"]["items"]:
                files[item["path"]] = data[item["key"]]
        for item in source.get("downwardAPI", {}).get("items", []):
            path = item["fieldRef"]["fieldPath"]
            assert path.startswith("metadata.annotations['") and path.endswith("']")
            files[item["path"]] = pod["metadata"]["annotations"][path[22:-2]]
    return files


# --- every job of the corpus --------------------------------------------------------------------


def _corpus_jobs() -> list[Path]:
    files = sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.name != "INDEX.md")
    jobs = []
    for path in files:
        result = resolve_job(path.read_bytes(), {})
        if result.spec is not None and result.kind is Kind.JOB:
            jobs.append(path)
    return jobs


CORPUS_JOBS = _corpus_jobs()


@pytest.mark.shared("corpus")
def test_the_corpus_has_its_jobs() -> None:
    assert len(CORPUS_JOBS) >= 120


@pytest.mark.shared("corpus")
@pytest.mark.parametrize("path", CORPUS_JOBS, ids=[p.name for p in CORPUS_JOBS])
def test_every_corpus_job_becomes_valid_objects_or_a_clear_refusal(path: Path) -> None:
    try:
        request = request_of(path.read_bytes(), job_id="corpus-job-xxxxxxxx")
    except NotRunnable as exc:
        # a v1 codeDir on the job's own HDFS (or a placeholder): it is copied into the
        # container, and there is no such file system here
        assert exc.path == "codeDir", exc
        return
    try:
        objects = build(request)
    except LaunchRefused as exc:
        # only what a cluster cannot serve: an hdfs / local-path / ftp prerequisite, or a v1
        # codeDir on a path of the server's machine (its cluster file system's, in OpenPAI)
        message = str(exc)
        assert message.startswith("task role '") and "prerequisite '" in message, message
        words = ("hdfs://", "/mnt/", "ftp://", "prerequisite 'code': /")
        assert any(word in message for word in words), message
        return
    for obj in objects.all():
        validate(obj)
    assert len(objects.pods) == request.total_instances
    hosts = [p["spec"]["hostname"] for p in objects.pods]
    assert len(set(hosts)) == len(hosts)
    for pod in objects.pods:
        assert pod["spec"]["subdomain"] == objects.service["metadata"]["name"]
        files = config_files(objects, pod)
        assert {"entrypoint.sh", "env-common-000.sh", "env-instance.sh"} <= set(files)
    assert len(yaml_stream(objects.all())) < 1 << 20


@pytest.mark.shared("corpus")
def test_corpus_jobs_are_mostly_runnable_on_kubernetes() -> None:
    runnable = 0
    for path in CORPUS_JOBS:
        try:
            build(request_of(path.read_bytes()))
            runnable += 1
        except (LaunchRefused, NotRunnable):
            pass
    # 19 v1 jobs run `code/...` from a codeDir on their cluster's HDFS, which is not here
    assert runnable >= 95


# --- the two-role job ---------------------------------------------------------------------------


def test_each_instance_has_its_hostname_under_the_headless_service() -> None:
    objects = build(request_of(V2_JOB))
    service = objects.service
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    pods = by_name(objects)
    assert sorted(pods) == ["ps-0", "worker-0", "worker-1"]
    for pod in pods.values():
        assert pod["spec"]["subdomain"] == service["metadata"]["name"]
        assert pod["spec"]["restartPolicy"] == "Never"
        labels = pod["metadata"]["labels"]
        assert all(labels[k] == v for k, v in service["spec"]["selector"].items())
    assert (
        pods["worker-1"]["metadata"]["labels"].items()
        >= {
            "paigraph.io/job": "tf_dist-0a1b2c3d",
            "paigraph.io/attempt": "1",
            "paigraph.io/role": "worker",
            "paigraph.io/index": "1",
        }.items()
    )
    assert pods["ps-0"]["metadata"]["annotations"]["paigraph.io/job-name"] == "tf_dist"


def test_resources_shm_and_the_gpu_resource_name() -> None:
    objects = build(request_of(V2_JOB))
    worker, ps = main(by_name(objects)["worker-0"]), main(by_name(objects)["ps-0"])
    assert worker["resources"]["limits"] == {"cpu": "2", "memory": "8192Mi", "nvidia.com/gpu": "1"}
    assert worker["resources"]["requests"] == worker["resources"]["limits"]
    assert ps["resources"]["limits"] == {"cpu": "2", "memory": "4096Mi"}
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"} in ps["env"]
    pod = by_name(objects)["worker-0"]
    (shm,) = [v for v in pod["spec"]["volumes"] if v["name"] == "shm"]
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "512Mi"}
    assert {"name": "shm", "mountPath": "/dev/shm"} in main(pod)["volumeMounts"]

    amd = build(request_of(V2_JOB), gpu_resource="amd.com/gpu")
    limits = main(by_name(amd)["worker-1"])["resources"]["limits"]
    assert limits["amd.com/gpu"] == "1" and "nvidia.com/gpu" not in limits
    assert all(e["name"] != "NVIDIA_VISIBLE_DEVICES" for e in main(by_name(amd)["ps-0"])["env"])
    with pytest.raises(SettingsError, match="gpu_resource"):
        load_settings(environ={"PAIGRAPH_K8S_GPU_RESOURCE": "gpu"})


def test_the_environment_names_peers_by_stable_dns_names_and_the_pod_ip(tmp_path: Path) -> None:
    request = request_of(V2_JOB)
    objects = build(request)
    service = objects.service["metadata"]["name"]
    data = objects.config_map["data"]
    pod = by_name(objects)["worker-1"]
    env = {e["name"]: e for e in main(pod)["env"]}
    for name in ("PAI_CONTAINER_HOST_IP", "PAI_CURRENT_CONTAINER_IP"):
        assert env[name]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    # the two files the container concatenates, read by a real shell
    files = config_files(objects, pod)
    (tmp_path / "common.sh").write_text(files["env-common-000.sh"])
    (tmp_path / "own.sh").write_text(files["env-instance.sh"])
    shown = subprocess.run(
        ["sh", "-c", f"env -i sh -c '. {tmp_path}/common.sh; . {tmp_path}/own.sh; env'"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    got = dict(line.split("=", 1) for line in shown.splitlines() if line.startswith("PAI_"))
    ports = json.loads(pod["metadata"]["annotations"]["paigraph.io/ports"])
    http = {
        p["metadata"]["name"]: json.loads(p["metadata"]["annotations"]["paigraph.io/ports"])[
            "http"
        ][0]
        for p in objects.pods
    }
    assert got["PAI_TASK_ROLE_worker_HOST_LIST"] == ",".join(
        f"worker-{i}.{service}:{http[f'{service}-worker-{i}']}" for i in range(2)
    )
    assert got["PAI_HOST_IP_ps_0"] == f"ps-0.{service}"
    assert got["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"] == "1"
    assert got["PAI_CONTAINER_HOST_grpc_PORT_LIST"] == ",".join(map(str, ports["grpc"]))
    assert "PAI_CONTAINER_HOST_IP" not in got  # the downward API gives it
    placements = {
        (r.name, i): AttemptBuilder(request, SETTINGS, "jobs").placement(r.name, i)
        for r in request.roles
        for i in range(r.instances)
    }
    expected = runtime_env(request, placements, "worker", 1)
    del expected["PAI_CONTAINER_HOST_IP"], expected["PAI_CURRENT_CONTAINER_IP"]
    assert got == {k: v for k, v in expected.items() if k.startswith("PAI_")}
    assert data["entrypoint-worker.sh"] == entrypoint_script(request.role("worker"))


def test_pod_network_ports_are_laid_out_per_instance_and_v1_begin_at_is_kept() -> None:
    doc = copy.deepcopy(V2_JOB)
    objects = build(request_of(doc), port_range=PortRange(start=20000, end=20100))
    ports = json.loads(by_name(objects)["worker-0"]["metadata"]["annotations"]["paigraph.io/ports"])
    assert ports == {"grpc": [20000, 20001], "ssh": [20002], "http": [20003]}
    declared = [p["containerPort"] for p in main(by_name(objects)["worker-0"])["ports"]]
    assert declared == [20000, 20001, 20002, 20003]


def test_host_network_hashes_ports_as_openpai_does() -> None:
    # OpenPAI's runtime gave pod f1020521-... these tcp ports (as OpenPAI's runtime documents them)
    uid = "f1020521-9bda-11ea-830b-000d3ab25bb6"
    window = PortRange(start=20000, end=40000)
    assert [hashed_port(uid, "tcp", i, window) for i in range(3)] == [29877, 22353, 29076]
    assert hashed_port(uid, "http", 0, window) == 30643

    request = request_of(V2_JOB)
    objects = build(request, host_network=True, pod_security="privileged")
    again = build(request, host_network=True, pod_security="privileged")
    retry = build(
        request.model_copy(update={"attempt": 2}), host_network=True, pod_security="privileged"
    )
    pod = by_name(objects)["worker-0"]
    assert pod["spec"]["hostNetwork"] is True
    assert pod["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    declared = main(pod)["ports"]
    assert all(p["hostPort"] == p["containerPort"] for p in declared)
    assert all(15000 <= p["containerPort"] < 40000 for p in declared)
    assert by_name(again)["worker-0"] == pod  # decided before the pod exists, the same each time
    assert main(by_name(retry)["worker-0"])["ports"] != declared  # a new attempt, new ports
    prepare, _barrier = pod["spec"]["initContainers"]
    script = prepare["command"][-1]
    assert all(str(p["containerPort"]) in script for p in declared)
    assert "address already in use" in script


def test_data_and_scripts_are_fetched_by_an_init_container() -> None:
    objects = build(request_of(V2_JOB))
    worker, ps = by_name(objects)["worker-0"], by_name(objects)["ps-0"]
    # nothing to fetch for the ps: only the barrier waits for its peers before its commands
    assert [c["name"] for c in ps["spec"]["initContainers"]] == ["barrier"]
    prepare, _barrier = worker["spec"]["initContainers"]
    assert prepare["image"] == SETTINGS.init_image
    script = prepare["command"][-1]
    assert "wget -q -O cifar.tgz https://example.org/cifar.tgz" in script
    assert "git clone -q https://example.org/bench.git /work/bench" in script
    assert {m["mountPath"] for m in prepare["volumeMounts"]} == {"/work/cifar", "/work/bench"}
    assert all(
        m.get("readOnly")
        for m in main(worker)["volumeMounts"]
        if m["mountPath"].startswith("/work/")
    )


def test_a_list_of_repositories_is_cloned_each_under_the_script_name() -> None:
    doc = copy.deepcopy(V2_JOB)
    doc["prerequisites"][2]["uri"] = [
        "https://github.com/MaggieQi/benchmarks@8482093",
        "https://example.org/team/models.git",
    ]
    prepare, _barrier = by_name(build(request_of(doc)))["worker-0"]["spec"]["initContainers"]
    script = prepare["command"][-1]
    assert "git clone -q https://github.com/MaggieQi/benchmarks /work/bench/benchmarks" in script
    assert "git -C /work/bench/benchmarks checkout -q 8482093" in script
    assert "git clone -q https://example.org/team/models.git /work/bench/models" in script
    doc["prerequisites"][2]["uri"] = ["https://a.org/x/models", "https://b.org/y/models.git"]
    with pytest.raises(LaunchRefused, match=r"would both be checked out at bench/models"):
        build(request_of(doc))


def test_what_kubernetes_cannot_serve_is_refused_naming_role_and_prerequisite() -> None:
    doc = copy.deepcopy(V2_JOB)
    doc["prerequisites"][1]["uri"] = ["hdfs://namenode:9000/cifar"]
    with pytest.raises(LaunchRefused, match=r"task role 'worker': prerequisite 'cifar': hdfs://"):
        build(request_of(doc))
    doc = copy.deepcopy(V2_JOB)
    doc["prerequisites"][2]["uri"] = "ssh://git@example.org/bench.git"
    with pytest.raises(LaunchRefused, match=r"'bench'.*cannot be cloned on Kubernetes"):
        build(request_of(doc))


def test_hdfs_locations_are_refused_naming_the_setting_unless_mapped_to_a_claim() -> None:
    doc = copy.deepcopy(V2_JOB)
    doc["prerequisites"][1]["uri"] = ["hdfs://namenode:9000/datasets/cifar"]
    doc["prerequisites"].append(
        {"name": "models", "type": "output", "uri": "hdfs://NameNode:9000/models/run1"}
    )
    doc["taskRoles"]["worker"]["output"] = "models"
    request = request_of(doc)
    with pytest.raises(LaunchRefused, match=r"'cifar'.*kubernetes setting hdfs_claims"):
        build(request)

    objects = build(request, hdfs_claims={"namenode:9000": "hdfs-data"})
    pod = by_name(objects)["worker-0"]
    claims = {
        v["name"]: v["persistentVolumeClaim"]
        for v in pod["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    }
    assert {c["claimName"] for c in claims.values()} == {"hdfs-data"}
    mounts = {m["mountPath"]: m for m in main(pod)["volumeMounts"]}
    assert mounts["/work/cifar/cifar"]["subPath"] == "datasets/cifar"
    assert mounts["/work/cifar/cifar"]["readOnly"] is True
    assert mounts["/work/models"]["subPath"] == "models/run1"
    assert not mounts["/work/models"].get("readOnly")
    prepare = " ".join(str(c.get("command")) for c in pod["spec"].get("initContainers", []))
    assert "datasets/cifar" not in prepare  # mounted, not downloaded
    for obj in objects.all():
        validate(obj)


def test_storages_become_persistent_volume_claims_by_name() -> None:
    request = request_of(V2_JOB)
    worker = request.role("worker")
    with_storage = worker.model_copy(
        update={
            "materials": [*worker.materials, Material(name="models", kind=Fetch.MOUNT)],
            "storages": [
                StorageMount(
                    name="shared",
                    source="team-nfs",
                    volume=True,
                    target="/mnt/shared",
                    read_only=True,
                )
            ],
        }
    )
    changed = request.model_copy(update={"roles": [request.roles[0], with_storage]})
    pod = by_name(build(changed))["worker-0"]
    claims = {
        v["name"]: v["persistentVolumeClaim"]
        for v in pod["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    }
    # the user's own claim of the storage's name, and the admin-defined storage's claim
    assert sorted(c["claimName"] for c in claims.values()) == ["pg-u-default-models", "team-nfs"]
    mounts = {m["mountPath"]: m for m in main(pod)["volumeMounts"]}
    assert mounts["/mnt/shared"].get("readOnly") is True
    assert "/work/models" in mounts
    for obj in build(changed).all():
        validate(obj)

    host_dir = with_storage.model_copy(
        update={
            "storages": [StorageMount(name="scratch", source="/data/scratch", target="/scratch")]
        }
    )
    with pytest.raises(
        LaunchRefused, match=r"storage 'scratch' is the host directory /data/scratch"
    ):
        build(request.model_copy(update={"roles": [request.roles[0], host_dir]}))
    bad_claim = worker.model_copy(
        update={
            "storages": [
                StorageMount(name="s", source="Team_NFS", volume=True, target="/mnt/shared")
            ]
        }
    )
    with pytest.raises(LaunchRefused, match=r"'Team_NFS' is not a PersistentVolumeClaim name"):
        build(request.model_copy(update={"roles": [request.roles[0], bad_claim]}))


def test_everything_is_owned_by_the_service() -> None:
    objects = build(request_of(_with_secrets()))
    owned = [objects.config_map, *objects.secrets, *objects.pods]
    assert len(objects.secrets) == 2
    for obj in owned:
        (ref,) = obj["metadata"]["ownerReferences"]
        assert ref["kind"] == "Service" and ref["name"] == objects.service["metadata"]["name"]
        assert with_owner(obj, "1234")["metadata"]["ownerReferences"][0]["uid"] == "1234"


def _with_secrets() -> dict[str, Any]:
    doc = copy.deepcopy(V2_JOB)
    doc["secrets"] = {"token": "s3cr3t-token", "regpw": "pull-pass"}
    doc["prerequisites"][0]["auth"] = {
        "username": "robot",
        "password": "<% $secrets.regpw %>",
        "registryuri": "registry.example.org:5000",
    }
    doc["taskRoles"]["ps"]["commands"] = ["login --token <% $secrets.token %>"]
    return doc


def test_secrets_reach_commands_from_a_secret_and_never_the_config_map() -> None:
    objects = build(request_of(_with_secrets()))
    job_secret, registry = objects.secrets
    # the username written as itself is a credential: lifted into a secret of its own
    assert job_secret["stringData"] == {
        "token": "s3cr3t-token",
        "regpw": "pull-pass",
        "tf_image-username": "robot",
    }
    config = json.loads(registry["stringData"][".dockerconfigjson"])
    entry = config["auths"]["registry.example.org:5000"]
    assert base64.b64decode(entry["auth"]).decode() == "robot:pull-pass"
    assert registry["type"] == "kubernetes.io/dockerconfigjson"
    for pod in objects.pods:
        assert pod["spec"]["imagePullSecrets"] == [{"name": registry["metadata"]["name"]}]
        assert {"name": "secrets", "mountPath": "/usr/local/pai/secrets", "readOnly": True} in main(
            pod
        )["volumeMounts"]
    text = json.dumps(objects.config_map) + json.dumps(objects.pods)
    assert "s3cr3t-token" not in text and "pull-pass" not in text and "robot" not in text
    assert (
        "login --token $(cat /usr/local/pai/secrets/token)"
        in objects.config_map["data"]["entrypoint-ps.sh"]
    )

    written = _with_secrets()
    written["prerequisites"][0]["auth"]["password"] = "plain-pass"
    kept = build(request_of(written))
    assert "plain-pass" not in json.dumps(kept.config_map)
    assert "plain-pass" in kept.secrets[1]["stringData"][".dockerconfigjson"]

    doc = _with_secrets()
    del doc["secrets"]["regpw"]
    with pytest.raises(LaunchRefused, match=r"refers to the secret 'regpw'"):
        build(request_of(doc))


def test_batch_scheduler_settings_reach_every_pod() -> None:
    objects = build(
        request_of(V2_JOB),
        scheduler_name="volcano",
        pod_labels={
            "kueue.x-k8s.io/queue-name": "{queue}",
            "kueue.x-k8s.io/pod-group-name": "{group}",
        },
        pod_annotations={"kueue.x-k8s.io/pod-group-total-count": "{count}"},
    )
    service = objects.service["metadata"]["name"]
    for pod in objects.pods:
        assert pod["spec"]["schedulerName"] == "volcano"
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] == service
        assert pod["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "3"
        validate(pod)


@pytest.mark.parametrize(
    "text", ["ps_server", "Trainer", "a" * 80, "x.y", "_lead", "ünï", "tf_dist-0a1b2c3d"]
)
def test_names_become_valid_labels_and_dns_names(text: str) -> None:
    value, label = label_value(text), dns_label(f"pai-{text}")
    assert len(value) <= 63 and len(label) <= 63
    assert value == text or value != label_value(text + "!")
    meta = {"name": label, "labels": {"paigraph.io/x": value}}
    validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})


def test_roles_whose_dns_forms_meet_get_distinct_hostnames() -> None:
    doc = copy.deepcopy(V2_JOB)
    doc["taskRoles"]["ps_server"] = doc["taskRoles"].pop("ps")
    request = request_of(doc)
    assert role_hosts(request)["ps_server"] == "ps-server"
    ps = request.role("ps_server")
    clash = request.model_copy(update={"roles": [ps, ps.model_copy(update={"name": "ps-server"})]})
    hosts = role_hosts(clash)
    assert hosts["ps_server"] != hosts["ps-server"]
    pods = build(clash).pods
    assert len({p["spec"]["hostname"] for p in pods}) == 2
    assert {p["metadata"]["annotations"]["paigraph.io/role-name"] for p in pods} == {
        "ps_server",
        "ps-server",
    }


# --- paigraph resolve --manifests ---------------------------------------------------------------


def test_resolve_manifests_prints_every_object_as_a_yaml_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAIGRAPH_K8S_NAMESPACE", "research")
    monkeypatch.setenv("PAIGRAPH_K8S_CONFIG", str(tmp_path / "k8s.yaml"))
    (tmp_path / "k8s.yaml").write_text(
        "host_network: true\npod_security: privileged\nport_range: 30000-31000\n"
    )
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(_with_secrets()))
    done = CliRunner().invoke(app, ["resolve", str(job), "--manifests"])
    assert done.exit_code == 0, done.output
    docs = list(yaml.safe_load_all(done.stdout))
    kinds = [d["kind"] for d in docs]
    assert kinds == [
        "Service",
        "ConfigMap",
        "Secret",
        "Secret",
        "NetworkPolicy",
        "Pod",
        "Pod",
        "Pod",
    ]
    assert {d["metadata"]["namespace"] for d in docs} == {"research"}
    assert "s3cr3t-token" not in done.stdout and "pull-pass" not in done.stdout
    for doc in docs:
        validate(doc)
    pods = [d for d in docs if d["kind"] == "Pod"]
    assert all(d["spec"]["hostNetwork"] for d in pods)
    assert all(30000 <= p["containerPort"] < 31000 for d in pods for p in main(d)["ports"])
    assert "the Service's uid" in done.stdout.splitlines()[1]
    # the same objects the backend creates, but for the masked secrets and the drawn job id
    job_id = docs[0]["metadata"]["annotations"]["paigraph.io/job-id"]
    settings = load_settings()
    expected = AttemptBuilder(
        request_of(_with_secrets(), job_id=job_id), settings, "research"
    ).objects()
    assert [d for d in docs if d["kind"] != "Secret"] == [
        o for o in expected.all() if o["kind"] != "Secret"
    ]


def test_resolve_manifests_says_what_kubernetes_cannot_run(tmp_path: Path) -> None:
    doc = copy.deepcopy(V2_JOB)
    doc["prerequisites"][1]["uri"] = ["hdfs://namenode:9000/cifar"]
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(doc))
    done = CliRunner().invoke(app, ["resolve", str(job), "--manifests"])
    assert done.exit_code == 1
    assert (
        "the kubernetes backend cannot run this job: task role 'worker': prerequisite 'cifar'"
        in done.output
    )
    assert "Traceback" not in done.output


# --- deploy/kubernetes --------------------------------------------------------------------------

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"


def test_the_deployment_files_are_valid_objects() -> None:
    docs = [
        d
        for f in sorted(DEPLOY.glob("*.yaml"))
        if f.name != "kustomization.yaml"
        for d in yaml.safe_load_all(f.read_text())
        if d
    ]
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "ServiceAccount", "Role", "RoleBinding"} <= kinds
    assert "Secret" not in kinds  # no password is shipped: the operator makes the Secrets
    for doc in docs:
        validate(doc)
    listed = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(
        f.name
        for f in DEPLOY.glob("*.yaml")
        if f.name not in ("kustomization.yaml", "postgres.yaml")
    )


def test_the_namespace_per_virtual_cluster_variant_grants_the_role_everywhere() -> None:
    variant = DEPLOY / "namespace-per-virtual-cluster"
    kustomization = yaml.safe_load((variant / "kustomization.yaml").read_text())
    listed = [*kustomization["resources"], *(p["path"] for p in kustomization["patches"])]
    files = {f.name for f in variant.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(listed) == sorted({"../", *files})  # the base, then every file here
    docs = {
        d["kind"]: d
        for f in sorted(variant.glob("*.yaml"))
        if f.name not in ("kustomization.yaml", "deployment-patch.yaml")
        for d in yaml.safe_load_all(f.read_text())
        if d
    }
    for doc in docs.values():
        validate(doc)
    assert docs["ClusterRoleBinding"]["roleRef"]["name"] == docs["ClusterRole"]["metadata"]["name"]
    role = yaml.safe_load((DEPLOY / "role.yaml").read_text())

    def grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
        return {
            (group, resource, verb)
            for rule in rules
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }

    everywhere = grants(docs["ClusterRole"]["rules"])
    assert grants(role["rules"]) <= everywhere
    assert everywhere - grants(role["rules"]) == {
        ("", "resourcequotas", verb) for verb in ("create", "get", "patch")
    }


# --- the pod's command in a real container ------------------------------------------------------


def _run_like_a_pod(
    tmp_path: Path, commands: list[str], *, stop_after: str | None = None
) -> tuple[int, str]:
    """Run worker-0's main container as the kubelet would (ConfigMap files mounted, the pod IP
    given by the downward API) on the local Docker engine; its exit code and output. With
    `stop_after`, the container is stopped once that line is in its output."""
    import docker

    request = request_of(V2_JOB).model_copy(deep=True)
    worker = request.role("worker").model_copy(
        update={"commands": commands, "materials": [], "image": "paigraph/busybox:test"}
    )
    request = request.model_copy(update={"roles": [request.role("ps"), worker]})
    objects = build(request)
    pod = by_name(objects)["worker-0"]
    config = tmp_path / "config"
    config.mkdir()
    for path, text in config_files(objects, pod).items():
        (config / path).write_text(text)
    container = main(pod)
    env = {e["name"]: e.get("value", "10.9.8.7") for e in container["env"]}
    engine = docker.from_env()
    run = engine.containers.run(
        container["image"],
        command=container["command"],
        environment=env,
        working_dir=container["workingDir"],
        volumes={str(config): {"bind": "/usr/local/pai-config", "mode": "ro"}},
        detach=True,
    )
    try:
        if stop_after is not None:
            until(lambda: stop_after in run.logs().decode(), repr(stop_after), 30, 0.05)
            run.stop(timeout=5)
        code = run.wait(timeout=60)["StatusCode"]
        return code, run.logs().decode()
    finally:
        run.remove(force=True)


@pytest.mark.docker
def test_the_pod_command_runs_the_entrypoint_and_logs_to_the_container_output(
    tmp_path: Path,
) -> None:
    service = build(request_of(V2_JOB)).service["metadata"]["name"]
    code, output = _run_like_a_pod(
        tmp_path,
        ["echo peers $PAI_TASK_ROLE_ps_HOST_LIST", "echo ip $PAI_CONTAINER_HOST_IP", "exit 3"],
    )
    assert code == 3
    assert f"peers ps-0.{service}:15001" in output
    assert "ip 10.9.8.7" in output
    assert "[paigraph] user commands exited with code 3" in output


@pytest.mark.docker
def test_a_pod_asked_to_stop_ends_with_sigterm_s_code(tmp_path: Path) -> None:
    code, output = _run_like_a_pod(tmp_path, ["echo sleeping", "sleep 600"], stop_after="sleeping")
    assert code == 143
    assert "received SIGTERM, stopping" in output


# --- the gang ------------------------------------------------------------------------------------


def test_the_default_gang_gates_every_pod_and_a_barrier_waits_for_every_peer(
    tmp_path: Path,
) -> None:
    objects = build(request_of(V2_JOB))
    assert objects.pod_group is None
    service = objects.service["metadata"]["name"]
    assert objects.service["spec"]["publishNotReadyAddresses"] is True
    peers = sorted(f"{p['spec']['hostname']}.{service}" for p in objects.pods)
    for pod in objects.pods:
        assert pod["spec"]["schedulingGates"] == [{"name": "paigraph.io/gang"}]
        barrier = pod["spec"]["initContainers"][-1]
        assert barrier["name"] == "barrier" and "env" not in barrier  # no API rights needed
        assert "serviceAccountName" not in pod["spec"]
        validate(pod)

    # the barrier's script, run by a real shell: it ends only once every peer's name resolves
    script = objects.pods[0]["spec"]["initContainers"][-1]["command"][2]
    names, bin_dir = tmp_path / "names", tmp_path / "bin"
    names.mkdir()
    bin_dir.mkdir()
    (bin_dir / "getent").write_text(f'#!/bin/sh\n[ -e "{names}/$2" ]\n')
    (bin_dir / "nslookup").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "sleep").write_text("#!/bin/sh\nexec /bin/sleep 0.1\n")  # not 2 s here
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    barrier = subprocess.Popen(
        ["/bin/sh", "-c", script], env=env, stdout=subprocess.PIPE, text=True
    )
    for peer in peers[:-1]:
        (names / peer).touch()
    with pytest.raises(subprocess.TimeoutExpired):
        barrier.wait(timeout=1)  # one peer still has no name
    (names / peers[-1]).touch()
    out, _ = barrier.communicate(timeout=30)
    assert barrier.returncode == 0
    assert f"every peer of {len(peers)} resolves" in out


def test_volcano_and_coscheduling_gangs_are_one_pod_group_of_the_whole_attempt() -> None:
    for mode, api_version in (
        ("volcano", "scheduling.volcano.sh/v1beta1"),
        ("coscheduling", "scheduling.x-k8s.io/v1alpha1"),
    ):
        objects = build(request_of(V2_JOB), gang_scheduler=mode)
        group = objects.pod_group
        assert group is not None and group["apiVersion"] == api_version
        assert group["spec"]["minMember"] == len(objects.pods) == 3
        assert group["metadata"]["name"] == objects.service["metadata"]["name"]
        assert group in objects.all()
        for pod in objects.pods:
            assert "schedulingGates" not in pod["spec"]
            validate(pod)
    volcano = build(request_of(V2_JOB), gang_scheduler="volcano")
    assert volcano.pod_group is not None and volcano.pod_group["spec"]["queue"] == "default"
    assert all(p["spec"]["schedulerName"] == "volcano" for p in volcano.pods)


def test_a_kueue_gang_carries_kueues_pod_group_labels() -> None:
    objects = build(request_of(V2_JOB), gang_scheduler="kueue", gang_queue="team-{queue}")
    service = objects.service["metadata"]["name"]
    for pod in objects.pods:
        labels, notes = pod["metadata"]["labels"], pod["metadata"]["annotations"]
        assert labels["kueue.x-k8s.io/pod-group-name"] == service
        assert labels["kueue.x-k8s.io/queue-name"] == "team-default"
        assert notes["kueue.x-k8s.io/pod-group-total-count"] == "3"
        assert "schedulingGates" not in pod["spec"]  # Kueue's webhook gates them itself
        validate(pod)
