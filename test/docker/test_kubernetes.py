"""docker/kubernetes/: every manifest `kubectl apply -k <variant>` would apply is valid against the
Kubernetes API schemas (kubernetes-validate, offline), and refers only to what the server has:
its flags, its routes (probes, Prometheus scrape path), its port; the objects fit together."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from test.helpers.deploy import K8S, build, by_kind, hpa_pod_metrics, parse_serve_args, server_routes

VARIANTS = ["cpu", "gpu"]
IDS = ["cpu-manifests", "nvidia-manifests"]  # a bare "gpu" id would mark the test as needing a GPU
# The oldest Kubernetes the manifests promise to work on (autoscaling/v2 and policy/v1 are GA
# since 1.23 / 1.21), and the newest schema kubernetes-validate ships.
VERSIONS = ["1.28.0", kubernetes_validate.latest_version()]
PRESTOP_SECONDS_MARGIN = 5


@pytest.fixture(params=VARIANTS, ids=IDS)
def variant(request) -> dict[str, dict]:
    return by_kind(build(K8S / request.param))


@pytest.mark.parametrize("name", VARIANTS, ids=IDS)
@pytest.mark.parametrize("version", VERSIONS)
def test_manifests_are_valid_kubernetes(name, version):
    objects = build(K8S / name)
    assert {o["kind"] for o in objects} == {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"}
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)  # raises ValidationError


def test_schema_validation_catches_mistakes():
    deployment = by_kind(build(K8S / "cpu"))["Deployment"]
    probe = deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] = {**probe, "httpGett": probe["httpGet"]}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)


def test_container_runs_real_flags_and_probes_real_routes(variant):
    pod = variant["Deployment"]["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["sglang", "serve"]
    args = parse_serve_args(container["args"])
    assert args.host == "0.0.0.0"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http"] == args.port
    routes = server_routes()
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert ("GET", get["path"]) in routes and get["port"] in ("http", args.port), probe
    # Model download and load fit in the startup probe's window.
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600
    notes = pod["metadata"]["annotations"]
    assert notes["prometheus.io/scrape"] == "true" and int(notes["prometheus.io/port"]) == args.port
    assert ("GET", notes["prometheus.io/path"]) in routes


def test_termination_grace_outlasts_prestop_and_drain(variant):
    spec = variant["Deployment"]["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args = parse_serve_args(container["args"])
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    pre_stop = int(command[1])
    assert pre_stop >= 5, "endpoints need a few seconds to drop the pod before it starts refusing"
    assert args.graceful_timeout > 0
    assert spec["terminationGracePeriodSeconds"] >= pre_stop + args.graceful_timeout + PRESTOP_SECONDS_MARGIN


def test_objects_select_the_deployments_pods(variant):
    deployment = variant["Deployment"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    service = variant["Service"]["spec"]
    assert service["selector"].items() <= pod_labels.items()
    (port,) = service["ports"]
    container_ports = {p["name"] for p in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert port["targetPort"] in container_ports
    assert variant["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    hpa = variant["HorizontalPodAutoscaler"]["spec"]
    assert hpa["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert hpa["minReplicas"] >= 2, "one replica cannot survive a disruption"


def test_variant_resources():
    cpu = by_kind(build(K8S / "cpu"))["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    args = parse_serve_args(cpu["args"])
    # A container sees every core of the node: torch threads must match the CPU limit.
    assert args.cpu_threads == int(cpu["resources"]["limits"]["cpu"])
    gpu = by_kind(build(K8S / "gpu"))
    container = gpu["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    # The scaling metric is one the pods serve (test_nginx_e2e.py reads it from a live /metrics).
    assert hpa_pod_metrics() == ["sglang_http_requests_in_flight"]
