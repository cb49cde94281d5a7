"""What deployment files (compose, Kubernetes) may refer to: the server's real flags and routes."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import yaml

from sglang.cli import build_serve_parser
from sglang.srt.server_args import ServerArgs
from test.helpers.model_info import make_model_info

K8S = Path(__file__).resolve().parents[2] / "docker" / "kubernetes"


def parse_serve_args(argv: list[str]) -> ServerArgs:
    """`sglang serve ARGV` as the CLI reads it; AssertionError naming the flags it does not know."""
    parser = build_serve_parser()
    args, unknown = parser.parse_known_args(argv)
    assert not unknown, f"not `sglang serve` flags: {unknown}"
    return ServerArgs.from_cli_args(args)


@functools.lru_cache(maxsize=1)
def server_routes() -> frozenset[tuple[str, str]]:
    """(method, path) of every route the HTTP app serves, read from the app itself."""
    from sglang.srt.frontend.http.http_server import create_app
    from sglang.srt.utils.network import PortArgs

    unused = PortArgs(
        ipc_dir="/nonexistent",
        scheduler_input="ipc:///nonexistent/s",
        detokenizer_input="ipc:///nonexistent/d",
        tokenizer_output_prefix="ipc:///nonexistent/t",
    )
    app = create_app(ServerArgs(), unused, make_model_info())  # routes only: the lifespan never runs
    return frozenset((m, r.path) for r in app.routes for m in (getattr(r, "methods", None) or ()))


_INTERPOLATION = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}")


def compose_interpolate(value: str, env: dict[str, str]) -> str:
    """Docker Compose's `${VAR}`, `${VAR:-default}`, `${VAR-default}` and `$$`, with `env` as the
    environment (the tests use {} : every default applies)."""

    def one(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name, op, default = m.group(1), m.group(2), m.group(3)
        if op == ":-" and not env.get(name):
            return default
        if op == "-" and name not in env:
            return default
        return env.get(name, "")

    return _INTERPOLATION.sub(one, value)


def build(kustomization_dir: Path) -> list[dict]:
    """The objects a kustomization lists, as `kubectl apply -k` would send them.

    The kustomizations here only list resources (files and directories); anything else in them
    would change the objects, so it fails the test rather than being ignored.
    """
    k = yaml.safe_load((kustomization_dir / "kustomization.yaml").read_text())
    assert set(k) <= {"apiVersion", "kind", "resources"}, f"kustomize features this check does not apply: {set(k)}"
    assert k["kind"] == "Kustomization"
    objects = []
    for res in k["resources"]:
        path = kustomization_dir / res
        if path.is_dir():
            objects += build(path)
        else:
            objects += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return objects


def by_kind(objects: list[dict]) -> dict[str, dict]:
    kinds = {}
    for obj in objects:
        assert obj["kind"] not in kinds, f"two {obj['kind']} objects"
        kinds[obj["kind"]] = obj
    return kinds


def hpa_pod_metrics() -> list[str]:
    """Names of the per-pod metrics the GPU variant's autoscaler scales on."""
    hpa = by_kind(build(K8S / "gpu"))["HorizontalPodAutoscaler"]
    return [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
