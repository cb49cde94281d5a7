"""docker/compose*.yaml: no Docker engine here, so check what `docker compose` would run.

Each file is read as Compose reads it (YAML, merge keys, `${VAR:-default}` with an empty
environment), and everything it hands to the server or nginx must be real: `sglang serve` flags,
the /health route the healthcheck calls, ports, the nginx template and the variables it needs.
"""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from sglang.srt.entrypoints.health_probe import probe_target
from test.helpers.deploy import compose_interpolate, parse_serve_args, server_routes
from test.helpers.nginx import REPO, TEMPLATE, render_template, unfilled_variables

DOCKER = REPO / "docker"
FILES = ["compose.yaml", "compose.gpu.yaml"]


def interpolate(node, env: dict):
    if isinstance(node, str):
        return compose_interpolate(node, env)
    if isinstance(node, list):
        return [interpolate(x, env) for x in node]
    if isinstance(node, dict):
        return {k: interpolate(v, env) for k, v in node.items()}
    return node


def load(name: str, env: dict = None) -> dict:
    return interpolate(yaml.safe_load((DOCKER / name).read_text()), env or {})


def replicas_of(doc: dict) -> dict:
    return {name: s for name, s in doc["services"].items() if s.get("entrypoint") == ["sglang", "serve"]}


def seconds(duration: str) -> float:
    m = re.fullmatch(r"(\d+)(ms|s|m)", duration)
    assert m, f"not a simple duration: {duration}"
    return int(m[1]) * {"ms": 0.001, "s": 1, "m": 60}[m[2]]


@pytest.mark.parametrize("name", FILES)
def test_replicas_run_real_flags_and_probe_a_real_route(name):
    doc = load(name)
    replicas = replicas_of(doc)
    assert len(replicas) >= 1
    for svc in replicas.values():
        args = parse_serve_args(shlex.split(svc["command"]))
        assert args.host == "0.0.0.0" and str(args.port) in svc["expose"]
        context = (DOCKER / svc["build"]["context"]).resolve()
        assert (context / svc["build"]["dockerfile"]).is_file()
        check = svc["healthcheck"]["test"]
        assert check[:3] == ["CMD", "sglang", "health"], check  # the image's own probe (sglang.cli.health)
        assert probe_target(parse_serve_args(check[3:])) == ("127.0.0.1", args.port, False), check
        assert ("GET", "/health") in server_routes()
        assert seconds(svc["stop_grace_period"]) > args.graceful_timeout > 0
        assert svc["restart"] in ("always", "unless-stopped", "on-failure")


@pytest.mark.parametrize("name", FILES)
def test_nginx_gets_the_template_and_every_variable_it_needs(name):
    doc = load(name)
    replicas = replicas_of(doc)
    nginx = doc["services"]["nginx"]
    env = {k: str(v) for k, v in nginx["environment"].items()}

    mount = next(v for v in nginx["volumes"] if v.split(":")[1].startswith("/etc/nginx/templates/"))
    src, dst = mount.split(":")[:2]
    assert (DOCKER / src).resolve() == TEMPLATE and dst.endswith(".template")
    conf = render_template(TEMPLATE.read_text(), env, [env["SGLANG_UPSTREAM"]])
    assert unfilled_variables(conf) == set()
    assert any(p.endswith(":" + env["NGINX_PORT"]) for p in nginx["ports"])

    # nginx reaches every replica under one name: the service, or an alias they all share.
    host, port = env["SGLANG_UPSTREAM"].rsplit(":", 1)
    for svc_name, svc in replicas.items():
        args = parse_serve_args(shlex.split(svc["command"]))
        aliases = (svc.get("networks") or {}).get("default", {}).get("aliases", [])
        assert host == svc_name or host in aliases, f"{svc_name} is not reachable as {host}"
        assert int(port) == args.port
        # nginx refuses exactly what the replica would refuse.
        assert int(env["SGLANG_MAX_PAYLOAD_BYTES"]) == args.max_payload_bytes
        assert nginx["depends_on"][svc_name]["condition"] == "service_healthy"


def test_cpu_fleet_threads_match_the_cpu_limit():
    for env in ({}, {"SGLANG_CPU_THREADS": "4", "SGLANG_REPLICAS": "3"}):
        svc = load("compose.yaml", env)["services"]["sglang"]
        args = parse_serve_args(shlex.split(svc["command"]))
        assert float(svc["deploy"]["resources"]["limits"]["cpus"]) == args.cpu_threads
        assert int(svc["deploy"]["replicas"]) >= 2
    # Extra flags go through SGLANG_ARGS, and must be real flags too.
    svc = load("compose.yaml", {"SGLANG_ARGS": "--model-path BAAI/bge-small-en-v1.5 --max-batch-size 64"})
    args = parse_serve_args(shlex.split(svc["services"]["sglang"]["command"]))
    assert args.model_path == "BAAI/bge-small-en-v1.5" and args.max_batch_size == 64


def test_gpu_fleet_puts_one_replica_on_each_gpu():
    replicas = replicas_of(load("compose.gpu.yaml"))
    assert len(replicas) >= 2
    gpus = []
    for svc in replicas.values():
        (device,) = svc["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
        gpus += device["device_ids"]
    assert len(gpus) == len(set(gpus)) == len(replicas)


def test_compose_interpolation_rules():
    assert compose_interpolate("a ${X:-1} ${Y-2} ${Z} $$HOME", {}) == "a 1 2  $HOME"
    assert compose_interpolate("${X:-1} ${Y-2}", {"X": "", "Y": ""}) == "1 "
    assert compose_interpolate("${X:-1}", {"X": "9"}) == "9"
