"""Small job configs for tests, built as data so each test changes only what it is about."""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml

V2_JOB: dict[str, Any] = {
    "protocolVersion": 2,
    "name": "tf_dist",
    "type": "job",
    "prerequisites": [
        {"name": "tf_image", "type": "dockerimage", "uri": "openpai/tensorflow"},
        {"name": "cifar", "type": "data", "uri": ["https://example.org/cifar.tgz"]},
        {"name": "bench", "type": "script", "uri": "https://example.org/bench.git"},
    ],
    "parameters": {"model": "resnet20", "batch": 32},
    "taskRoles": {
        "ps": {
            "instances": 1,
            "dockerImage": "tf_image",
            "resourcePerInstance": {"cpu": 2, "memoryMB": 4096, "gpu": 0},
            "commands": ["python ps.py --model <% $parameters.model %>"],
        },
        "worker": {
            "instances": 2,
            "dockerImage": "tf_image",
            "data": "cifar",
            "script": "bench",
            "completion": {"minSucceededInstances": 1},
            "resourcePerInstance": {
                "cpu": 2,
                "memoryMB": 8192,
                "gpu": 1,
                "ports": {"grpc": 2},
            },
            "commands": [
                "wget <% $data.uri[0] %>",
                "git clone <% $script.uri %>",
                "python train.py --batch <% $parameters.batch %>",
            ],
        },
    },
}

DRAFT_JOB: dict[str, Any] = {
    "protocol_version": "v2",
    "name": "cifar_draft",
    "type": "job",
    "parameters": {"model": "resnet20"},
    "tasks": [
        {
            "role": "worker",
            "data": "cifar10",
            "storage": "models",
            "dockerimage": "tf",
            "resource": {
                "instances": 2,
                "resourcePerInstance": {"cpu": 2, "memoryMB": 1024, "gpu": 0},
                "portList": [{"label": "grpc", "beginAt": 0, "portNumber": 1}],
            },
            "command": ["tar xzf $$data$$/x.tgz", "train --model $$model$$ --out $$storage$$"],
        },
        {
            "role": "ps",
            "dockerimage": "tf",
            "resource": {"resourcePerInstance": {"cpu": 1, "memoryMB": 512, "gpu": 0}},
            "command": ["serve"],
        },
    ],
    "prerequisites": [
        {"name": "tf", "type": "dockerimage", "uri": "openpai/tf"},
        {"name": "cifar10", "type": "data", "uri": ["https://example.org/c.tgz"]},
        {"name": "models", "type": "storage", "uri": ["hdfs://nn/models"]},
    ],
}

V1_JOB: dict[str, Any] = {
    "jobName": "tf-v1",
    "image": "openpai/tf",
    "dataDir": "hdfs://nn/data",
    "jobEnvs": {"MODE": "fast"},
    "taskRoles": [
        {
            "name": "ps_server",
            "taskNumber": 2,
            "cpuNumber": 2,
            "memoryMB": 8192,
            "gpuNumber": 0,
            "portList": [{"label": "grpc", "beginAt": 20000, "portNumber": 2}],
            "command": "python ps.py",
        },
        {"name": "worker", "taskNumber": 2, "command": "python worker.py"},
    ],
}


def v2(**changes: Any) -> dict[str, Any]:
    return copy.deepcopy(V2_JOB) | changes


def draft() -> dict[str, Any]:
    return copy.deepcopy(DRAFT_JOB)


def v1() -> dict[str, Any]:
    return copy.deepcopy(V1_JOB)


def as_yaml(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False)


def as_json(doc: Any) -> str:
    return json.dumps(doc, indent=2)
