"""Isolation on Kubernetes: a job mounts only its user's claims and the admin's storages, its
pods pass the Pod Security profile the cluster enforces, a NetworkPolicy keeps other pods out,
and the ssh plugin's keys stay in a Secret. The fake API server admits or refuses the objects
as a kube-apiserver would (tests/fake_kube_admission.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
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
    SshAccess,
    StorageMount,
)
from backends.kubernetes import KubernetesBackend
from backends.kubernetes_isolation import user_claim
from backends.kubernetes_manifests import AttemptBuilder
from backends.kubernetes_names import CLAIMS_KEY
from backends.kubernetes_settings import KubernetesSettings, SettingsError, load_settings
from server.cli.main import app
from server.events import bus_for
from server.jobs.launch import NotRunnable
from server.jobs.service import JobService
from server.shapes.job_states import JobState
from server.store import Store
from simulator.capabilities import KEPT_CAPABILITIES
from tests.backends.test_kubernetes_fake_cluster import (
    Events,
    backend_on,
    key,
    pod_of,
    ps_worker,
    role,
)
from tests.backends.test_kubernetes_fake_cluster import settings as fake_settings
from tests.backends.test_kubernetes_manifests import _corpus_jobs, request_of
from tests.fake_kube_admission import ENFORCE, pod_security_violations
from tests.fake_kube_api import FakeKubeAPI, validate
from tests.jobs import V2_JOB
from tests.waiting import until_async

pytestmark = pytest.mark.anyio

SETTINGS = KubernetesSettings(state_dir=Path("/nonexistent"))


def build(request: LaunchRequest, **settings: Any) -> Any:
    chosen = SETTINGS.model_copy(update=settings) if settings else SETTINGS
    return AttemptBuilder(request, chosen, "jobs").objects()


def with_storage(request: LaunchRequest, *materials: Material, user: str = "alice") -> Any:
    first = request.roles[0]
    changed = first.model_copy(update={"materials": [*first.materials, *materials]})
    return request.model_copy(update={"user": user, "roles": [changed, *request.roles[1:]]})


def claims(pod: dict[str, Any]) -> list[str]:
    return sorted(
        v["persistentVolumeClaim"]["claimName"]
        for v in pod["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    )


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as fake:
        yield fake


# --- claims --------------------------------------------------------------------------------------


def test_a_storage_mounts_the_users_own_claim_and_nothing_else() -> None:
    request = ps_worker()
    mine = with_storage(request, Material(name="models", kind=Fetch.MOUNT))
    assert claims(build(mine).pods[0]) == ["pg-u-alice-models"]
    named = with_storage(request, Material(name="out", kind=Fetch.MOUNT, uris=["pg-u-alice-ckpt"]))
    assert claims(build(named).pods[0]) == ["pg-u-alice-ckpt"]

    server_claim = with_storage(
        request, Material(name="db", kind=Fetch.MOUNT, uris=["data-postgres-0"])
    )
    with pytest.raises(LaunchRefused) as refused:
        build(server_claim)
    message = str(refused.value)
    assert message.startswith("task role 'ps': prerequisite 'db': the PersistentVolumeClaim")
    assert "'data-postgres-0' is not a claim of yours" in message
    assert "pg-u-alice-db" in message  # what to write instead

    others = with_storage(
        request, Material(name="steal", kind=Fetch.MOUNT, uris=["pg-u-bob-models"])
    )
    with pytest.raises(LaunchRefused, match=r"'pg-u-bob-models' is another user's claim"):
        build(others)


def test_claim_names_fit_dns_and_never_let_one_user_reach_anothers() -> None:
    pairs = [("a", "b-c"), ("a-b", "c"), ("A", "x"), ("a", "x"), ("ab", "x"), ("a.b", "x")]
    names = {user_claim(user, storage) for user, storage in pairs}
    assert len(names) == len(pairs)
    long = user_claim("U" * 64, "Data_Set." * 20)
    assert len(long) <= 253
    for name in [*names, long]:
        assert name.startswith("pg-u-")
        validate(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": name},
                "spec": {"accessModes": ["ReadWriteOnce"]},
            }
        )
    # user "a" cannot name the claim of user "a-b" (nor any of its hashed forms)
    theirs = user_claim("a-b", "c")
    request = with_storage(
        ps_worker(), Material(name="x", kind=Fetch.MOUNT, uris=[theirs]), user="a"
    )
    with pytest.raises(LaunchRefused, match="another user's claim"):
        build(request)


async def test_fake_cluster_a_user_naming_the_servers_claim_is_refused_before_anything_is_made(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    request = with_storage(
        ps_worker("steal-0000abcd"),
        Material(name="db", kind=Fetch.MOUNT, uris=["data-postgres-0"]),
    )
    async with backend_on(api, tmp_path) as backend:
        assert "'data-postgres-0' is not a claim of yours" in (backend.refusal(request) or "")
        with pytest.raises(LaunchRefused, match="prerequisite 'db'"):
            await backend.launch(request)
    assert api.objects == {}


def test_admin_storages_keep_their_own_claims() -> None:
    request = ps_worker()
    first = request.roles[0].model_copy(
        update={
            "storages": [
                StorageMount(name="team", source="team-nfs", volume=True, target="/mnt/team")
            ]
        }
    )
    pod = build(request.model_copy(update={"roles": [first, *request.roles[1:]]})).pods[0]
    assert claims(pod) == ["team-nfs"]


def end_ps_only(api: FakeKubeAPI) -> None:
    """While no server runs, every pod runs and ps-0 fails."""
    for host in ("ps-0", "worker-0", "worker-1"):
        api.schedule(pod_of(api, host))
        api.run(pod_of(api, host))
    api.exit(pod_of(api, "ps-0"), 1)


async def relaunch_ps(api: FakeKubeAPI, backend: KubernetesBackend, request: LaunchRequest) -> None:
    """Adopt the attempt, then run its ended ps-0 again."""
    reports = {f"{r.key.role}-{r.key.index}": r for r in await backend.reconcile()}
    assert reports["ps-0"].exit_code == 1
    await backend.relaunch(key(request, "ps", 0))
    await until_async(lambda: pod_of(api, "ps-0").endswith("-r2"), "ps-0 run again", 10, 0.05)


async def test_fake_cluster_an_attempt_adopted_after_an_upgrade_keeps_its_claims(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    """An attempt made before claims were per user mounted `data` itself; its ConfigMap has
    no record of claims. Adopted, an instance run again mounts the same claim."""
    request = with_storage(
        ps_worker("legacy-0000beef"), Material(name="data", kind=Fetch.MOUNT), user="alice"
    )
    async with backend_on(api, tmp_path) as first:
        events = Events(first)
        await first.launch(request)
        api.wait_for_pods(3)
        assert claims(api.get("pods", "jobs", pod_of(api, "ps-0"))) == ["pg-u-alice-data"]
        events.close()
    # as the earlier version left it: its pod mounted `data`, its ConfigMap names no claims
    with api.lock:
        (config_key,) = [k for k in api.objects if k[0] == "configmaps"]
        del api.objects[config_key]["data"][CLAIMS_KEY]
    end_ps_only(api)
    async with backend_on(api, tmp_path) as second:
        await relaunch_ps(api, second, request)
        assert claims(api.get("pods", "jobs", pod_of(api, "ps-0"))) == ["data"]
        await second.forget(request.job_id, 1)


# --- hardened pods -------------------------------------------------------------------------------


def test_pods_are_hardened_by_default() -> None:
    objects = build(request_of({**V2_JOB, "secrets": {"token": "t"}}))
    for pod in objects.pods:
        spec = pod["spec"]
        assert spec["automountServiceAccountToken"] is False
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert "hostNetwork" not in spec
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"], "add": list(KEPT_CAPABILITIES)}
        # the secrets are readable by any user of the container: group fsGroup, mode 0440
        (secret,) = [v["secret"] for v in spec["volumes"] if v["name"] == "secrets"]
        assert secret["defaultMode"] == 0o440
        assert spec["securityContext"]["fsGroup"] == SETTINGS.fs_group
        assert pod_security_violations(pod, "baseline") == []
        assert pod_security_violations(pod, "restricted")  # runs as the image's user


def test_every_corpus_job_passes_baseline_and_restricted_when_asked() -> None:
    restricted = SETTINGS.model_copy(update={"pod_security": "restricted", "run_as_user": 1000})
    checked = 0
    for path in _corpus_jobs():
        try:
            request = request_of(path.read_bytes())
            default = AttemptBuilder(request, SETTINGS, "jobs").objects()
        except (LaunchRefused, NotRunnable, AssertionError):
            continue  # refused jobs are covered by test_kubernetes_manifests
        strict = AttemptBuilder(request, restricted, "jobs").objects()
        for pod in default.pods:
            assert pod_security_violations(pod, "baseline") == [], path.name
        for pod in strict.pods:
            assert pod_security_violations(pod, "restricted") == [], path.name
            assert pod["spec"]["securityContext"]["runAsUser"] == 1000
        checked += 1
    assert checked > 50


def test_the_settings_refuse_profiles_that_cannot_hold(tmp_path: Path) -> None:
    config = tmp_path / "k8s.yaml"
    config.write_text("host_network: true\n")
    with pytest.raises(SettingsError, match=r"host_network: .*set pod_security: privileged"):
        load_settings(config, environ={})
    config.write_text("pod_security: restricted\nrun_as_user: 0\n")
    with pytest.raises(SettingsError, match=r"run_as_user: the restricted profile forbids"):
        load_settings(config, environ={})
    config.write_text("pod_security: strict\n")
    with pytest.raises(SettingsError, match=r"pod_security"):
        load_settings(config, environ={})


async def test_fake_cluster_a_pod_security_refusal_is_a_clear_error_not_retried(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    api.label_namespace("jobs", **{ENFORCE: "restricted"})
    request = ps_worker("strict-0000aaaa")
    async with backend_on(api, tmp_path) as backend:
        with pytest.raises(LaunchRefused) as refused:
            await backend.launch(request)
        message = str(refused.value)
        assert "Pod Security admission refuses the pods" in message
        assert 'violates PodSecurity "restricted:latest"' in message
        assert "runAsNonRoot != true" in message
        assert "set pod_security to the level the jobs' namespace enforces" in message
        await until_async(lambda: not api.objects, "the refused attempt removed", 10, 0.05)


async def test_fake_cluster_restricted_pods_are_admitted_where_restricted_is_enforced(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    api.label_namespace("jobs", **{ENFORCE: "restricted"})
    request = ps_worker("strict-0000bbbb", secrets={"token": "t0k3n"})
    async with backend_on(api, tmp_path, pod_security="restricted", run_as_user=1000) as backend:
        events = Events(backend)
        await backend.launch(request)
        names = api.wait_for_pods(3)
        for name in names:
            pod = api.get("pods", "jobs", name)
            assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
            api.schedule(name)
            api.exit(name, 0)
        await events.until(lambda: len(events.ended()) == 3)
        assert {e.exit_code for e in events.ended().values()} == {0}
        events.close()
        await backend.forget(request.job_id, 1)


async def test_fake_cluster_baseline_refuses_what_the_node_network_needs(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    request = LaunchRequest(job_id="hostnet-0000dddd", job_name="h", roles=[role("worker")])
    async with backend_on(api, tmp_path, host_network=True, pod_security="privileged") as backend:
        with pytest.raises(LaunchRefused, match=r"host namespaces \(hostNetwork=true\)"):
            await backend.launch(request)


# --- the network ---------------------------------------------------------------------------------


def _selects(selector: dict[str, Any], pod: dict[str, Any]) -> bool:
    labels = pod["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def admits(policy: dict[str, Any], source: dict[str, Any], target: dict[str, Any]) -> bool:
    """Whether the NetworkPolicy lets `source` reach `target` (same namespace, pod selectors
    only, as the backend writes them); a pod the policy does not select is not isolated."""
    if not _selects(policy["spec"]["podSelector"], target):
        return True
    return any(
        "podSelector" in peer and _selects(peer["podSelector"], source)
        for rule in policy["spec"].get("ingress", [])
        for peer in rule.get("from", [])
    )


async def test_fake_cluster_a_network_policy_per_attempt_lets_in_only_its_own_pods(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    one, two = ps_worker("netone-0000aaaa"), ps_worker("nettwo-0000bbbb")
    allow = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitor"}}}]
    async with backend_on(api, tmp_path, network_allow_from=allow) as backend:
        await backend.launch(one)
        await backend.launch(two)
        api.wait_for_pods(6)
        policies = api.list("networkpolicies", "jobs")
        assert len(policies) == 2
        for policy in policies:
            validate(policy)
            assert policy["spec"]["policyTypes"] == ["Ingress"]
            assert allow[0] in policy["spec"]["ingress"][0]["from"]
        pods = api.pods()
        job = {p["metadata"]["name"]: p["metadata"]["labels"]["paigraph.io/job"] for p in pods}
        for source in pods:
            for target in pods:
                same = job[source["metadata"]["name"]] == job[target["metadata"]["name"]]
                assert all(admits(p, source, target) for p in policies) == same
        await backend.forget(one.job_id, 1)
        assert len(api.list("networkpolicies", "jobs")) == 1
        await backend.forget(two.job_id, 1)
    assert api.objects == {}


# --- ssh -----------------------------------------------------------------------------------------

PRIVATE = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\n-----END OPENSSH PRIVATE KEY-----\n"
)


def _ssh_request(job_id: str = "sshjob-0000aaaa") -> LaunchRequest:
    return ps_worker(job_id).model_copy(
        update={
            "ssh": SshAccess(
                authorized_keys=["ssh-ed25519 AAAAuser user@laptop"],
                job_private_key=PRIVATE,
                job_public_key="ssh-ed25519 AAAAjob job",
            )
        }
    )


def test_the_ssh_keys_are_in_a_secret_and_never_in_the_config_map() -> None:
    objects = build(_ssh_request())
    (ssh,) = [s for s in objects.secrets if s["metadata"]["name"].endswith("-ssh")]
    assert ssh["stringData"]["job_key"] == PRIVATE
    assert "ssh-ed25519 AAAAuser" in ssh["stringData"]["authorized_keys"]
    config = ssh["stringData"]["config"]
    assert "Host worker-1\n" in config and "HostName worker-1.pai-sshjob-0000aaaa-1" in config
    assert PRIVATE.splitlines()[1] not in json.dumps(objects.config_map)
    assert "sshd" in objects.config_map["data"]["entrypoint-ps.sh"]
    for pod in objects.pods:
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "ssh"]
        assert volume["secret"]["defaultMode"] == 0o440
        mount = [m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "ssh"]
        assert mount == [{"name": "ssh", "mountPath": "/usr/local/pai/ssh", "readOnly": True}]
        assert pod_security_violations(pod, "baseline") == []
    for obj in objects.all():
        validate(obj)


def test_resolve_manifests_masks_the_ssh_key(tmp_path: Path) -> None:
    doc = json.loads(json.dumps(V2_JOB))
    doc["extras"] = {
        "com.microsoft.pai.runtimeplugin": [{"plugin": "ssh", "parameters": {"jobssh": True}}]
    }
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(doc))
    done = CliRunner().invoke(app, ["resolve", str(job), "--manifests"])
    assert done.exit_code == 0, done.output
    docs = list(yaml.safe_load_all(done.stdout))
    secrets = [d for d in docs if d["kind"] == "Secret"]
    assert secrets, "the ssh plugin's Secret"
    assert "PRIVATE KEY" not in done.stdout
    assert all(set(s["stringData"].values()) == {"<masked>"} for s in secrets)


async def test_fake_cluster_an_adopted_ssh_job_keeps_its_key(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    request = _ssh_request("sshadopt-0000aaaa")
    async with backend_on(api, tmp_path) as first:
        await first.launch(request)
        api.wait_for_pods(3)
    end_ps_only(api)
    async with backend_on(api, tmp_path) as second:
        await relaunch_ps(api, second, request)
        (secret,) = [
            s for s in api.list("secrets", "jobs") if s["metadata"]["name"].endswith("-ssh")
        ]
        assert "job_key" in secret["data"]
        again = api.get("pods", "jobs", pod_of(api, "ps-0"))
        assert any(v["name"] == "ssh" for v in again["spec"]["volumes"])
        (config,) = api.list("configmaps", "jobs")
        assert "PRIVATE KEY" not in json.dumps(config)
        await second.forget(request.job_id, 1)
    assert api.objects == {}


# --- virtual clusters ----------------------------------------------------------------------------


def test_a_virtual_cluster_maps_to_its_kueue_local_queue() -> None:
    queues = {"default": "team-a-queue", "vc2": "team-b-queue"}
    objects = build(ps_worker(), queue_of_virtual_cluster=queues)
    for pod in objects.pods:
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a-queue"
        validate(pod)
    other = ps_worker().model_copy(update={"virtual_cluster": "vc9"})
    with pytest.raises(LaunchRefused, match=r"virtual cluster 'vc9' has no queue"):
        build(other, queue_of_virtual_cluster=queues)
    assert "kueue.x-k8s.io/queue-name" not in build(ps_worker()).pods[0]["metadata"]["labels"]


# --- through the job service ---------------------------------------------------------------------


async def test_fake_cluster_the_service_refuses_a_job_naming_a_claim_not_its_users(
    api: FakeKubeAPI, tmp_path: Path, store: Store, db_url: str
) -> None:
    bus = bus_for(db_url)
    service = JobService(store, KubernetesBackend(fake_settings(api, tmp_path)), bus)
    await service.start()
    try:
        kate = store.create_user("kate")[0]
        for claim, why in [
            ("data-postgres-0", "is not a claim of yours"),
            ("pg-u-bob-models", "is another user's claim"),
        ]:
            doc = json.loads(json.dumps(V2_JOB))
            doc["prerequisites"].append({"name": "out", "type": "output", "uri": claim})
            doc["taskRoles"]["worker"]["output"] = "out"
            refused = await service.submit(kate, json.dumps(doc))
            assert refused.job is None
            # at the field that names the claim
            assert [(e.path_parts(), e.code) for e in refused.errors] == [
                (["taskRoles", "worker", "output"], "refused")
            ]
            message = refused.errors[0].message
            assert (
                f"task role 'worker': prerequisite 'out': the PersistentVolumeClaim {claim!r}"
                in (message)
            )
            assert why in message and "pg-u-kate-out" in message
        assert api.objects == {}
        assert (await asyncio.to_thread(store.list_jobs)).jobs == []
    finally:
        await service.close()
        with contextlib.suppress(Exception):
            await bus.close()


async def test_fake_cluster_a_pod_security_refusal_fails_the_job_without_retries(
    api: FakeKubeAPI, tmp_path: Path, store: Store, db_url: str
) -> None:
    api.label_namespace("jobs", **{ENFORCE: "restricted"})
    bus = bus_for(db_url)
    service = JobService(store, KubernetesBackend(fake_settings(api, tmp_path)), bus)
    await service.start()
    try:
        kate = store.create_user("kate")[0]
        doc = json.loads(json.dumps(V2_JOB))
        doc["jobRetryCount"] = 3
        outcome = await service.submit(kate, json.dumps(doc))
        assert outcome.errors == [] and outcome.job is not None
        job_id = outcome.job.id

        async def ended() -> Any:
            job = await asyncio.to_thread(store.get_job, job_id)
            return job if job is not None and job.state.is_final else None

        job = await until_async(ended, "the job ending", 15, 0.05)
        assert (job.state, job.attempt, job.retries) == (JobState.FAILED, 1, 0)
        assert 'violates PodSecurity "restricted:latest"' in job.state_reason
        assert "set pod_security to the level the jobs' namespace enforces" in job.state_reason
        await until_async(lambda: not api.objects, "nothing left in the cluster", 10, 0.05)
    finally:
        await service.close()
        with contextlib.suppress(Exception):
            await bus.close()
