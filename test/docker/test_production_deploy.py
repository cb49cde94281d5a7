"""The CPU and CUDA images and the systemd unit, checked without Docker (none runs here): every
SGLANG_* variable they set is a real flag with a valid value, the HEALTHCHECK runs `sglang health`
(which probes /health), a non-root user, the CPU kernels compiled at build time and no compiler
in the CPU runtime stage; `systemd-analyze verify` on the unit."""

from __future__ import annotations

import configparser
import importlib.metadata
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglang.cli import COMMANDS, build_serve_parser
from sglang.srt.utils.env_flags import env_actions, read_env

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = [ROOT / "docker" / "Dockerfile", ROOT / "docker" / "Dockerfile.cpu"]
UNIT = ROOT / "docker" / "systemd" / "sglang-embed.service"
UNIT_ENV = ROOT / "docker" / "systemd" / "sglang-embed.env"
NOT_FLAGS = {"SGLANG_KERNEL_PREBUILT", "SGLANG_KERNEL_CACHE"}  # read by cpu_kernel_loader / portable_kernels
COMPILERS = ("gcc", "g++", "clang", "build-essential", "cc ")
PREBUILD = "python -m sglang.srt.layers.prebuild_kernels"


def _stages(path: Path) -> list[list[tuple[str, str]]]:
    """Instructions (KEYWORD, arguments) per build stage, continuation lines joined, comments dropped."""
    lines = [ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith("#")]
    text = re.sub(r"\\\n", " ", "\n".join(lines))
    stages: list[list[tuple[str, str]]] = [[]]
    for line in filter(None, (ln.strip() for ln in text.splitlines())):
        keyword, _, rest = line.partition(" ")
        if keyword.upper() == "FROM" and stages[-1] and any(k == "FROM" for k, _ in stages[-1]):
            stages.append([])
        stages[-1].append((keyword.upper(), " ".join(rest.split())))
    return stages


def _env(instructions) -> dict[str, str]:
    out = {}
    for keyword, rest in instructions:
        if keyword == "ENV":
            out.update(item.split("=", 1) for item in shlex.split(rest))
    return out


def _flag_vars() -> set[str]:
    return {var for _, var in env_actions(build_serve_parser())}


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_image_runs_the_server_from_the_environment_with_a_healthcheck(path):
    final = _stages(path)[-1]
    keywords = dict(final)  # the last of each keyword
    assert json.loads(keywords["ENTRYPOINT"]) == ["sglang", "serve"]
    scripts = importlib.metadata.entry_points(group="console_scripts", name="sglang")
    assert [e.value for e in scripts] == ["sglang.cli:main"]
    # HEALTHCHECK: `sglang health` reads the same SGLANG_* variables and probes GET /health.
    options, _, cmd = keywords["HEALTHCHECK"].partition(" CMD ")
    assert json.loads(cmd) == ["sglang", "health"] and "health" in COMMANDS
    assert "--start-period=" in options and "--interval=" in options
    assert '"/health"' in (ROOT / "python/sglang/srt/entrypoints/health_probe.py").read_text()
    server = (ROOT / "python/sglang/srt/frontend/http/http_server.py").read_text()
    assert '@app.get("/health")' in server and 'add_api_route("/health", health, methods=["HEAD"]' in server
    # A non-root user the image creates.
    user = keywords["USER"]
    assert user not in ("root", "0")
    assert any(k == "RUN" and f"--uid {user}" in rest for k, rest in sum(_stages(path), []))
    # Model path and port from the environment: the variables are real flags with valid values.
    env = _env(final)
    flags = {k: v for k, v in env.items() if k.startswith("SGLANG_")}
    assert set(flags) - NOT_FLAGS <= _flag_vars(), set(flags) - NOT_FLAGS - _flag_vars()
    read_env(build_serve_parser(), {k: v for k, v in flags.items() if k not in NOT_FLAGS})  # raises if invalid
    assert flags["SGLANG_HOST"] == "0.0.0.0" and keywords["EXPOSE"] == flags["SGLANG_PORT"]
    # Every variable the comments tell users to set exists.
    mentioned = set(re.findall(r"SGLANG_[A-Z0-9_]+", path.read_text())) - {"SGLANG_"}
    assert mentioned - NOT_FLAGS <= _flag_vars(), mentioned - NOT_FLAGS - _flag_vars()
    # Extras installed by the image exist.
    extras = importlib.metadata.metadata("sglang-embed").get_all("Provides-Extra")
    for group in re.findall(r'"\.\[([a-z,]+)\]"', path.read_text()):
        assert set(group.split(",")) <= set(extras), group


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_cpu_kernels_are_compiled_when_the_image_is_built(path):
    stages = _stages(path)
    runs = [rest for stage in stages for k, rest in stage if k == "RUN" and PREBUILD in rest]
    assert len(runs) == 1
    directory = runs[0].split(PREBUILD, 1)[1].split()[0]
    assert _env(stages[-1])["SGLANG_KERNEL_PREBUILT"] == directory  # where the loader looks at run time
    if len(stages) > 1:  # multi-stage: the runtime stage copies the builds and has no compiler
        final = stages[-1]
        assert any(k == "COPY" and "--from=build" in rest and directory in rest for k, rest in final)
        installs = " ".join(rest for k, rest in final if k == "RUN")
        assert not [c for c in COMPILERS if c in installs], installs


def test_cpu_image_is_multi_stage():
    assert len(_stages(DOCKERFILES[1])) == 2


def _unit() -> configparser.ConfigParser:
    unit = configparser.ConfigParser(strict=False, interpolation=None)  # Environment= may repeat
    unit.optionxform = str
    unit.read_string(UNIT.read_text())
    return unit


def test_systemd_unit_restarts_on_failure_but_not_on_a_configuration_error():
    service = _unit()["Service"]
    assert service["Restart"] == "on-failure"
    assert service["RestartPreventExitStatus"] == "2"  # `sglang serve` exits 2 on a ConfigError
    assert service["ExecStart"].endswith("/sglang serve") and service["KillSignal"] == "SIGTERM"
    assert service["EnvironmentFile"].lstrip("-") == "/etc/sglang-embed/env"
    assert int(service["TimeoutStopSec"]) > 30  # longer than the default --graceful-timeout drain
    # The example environment file sets real flags to valid values.
    env = dict(
        line.split("=", 1) for line in UNIT_ENV.read_text().splitlines() if line.strip() and not line.startswith("#")
    )
    assert env and set(env) <= _flag_vars()
    args = read_env(build_serve_parser(), env)
    assert int(args["graceful_timeout"][1]) < int(service["TimeoutStopSec"])


@pytest.mark.slow
def test_systemd_analyze_verifies_the_unit(tmp_path):
    """`systemd-analyze verify` (make test installs Debian's systemd package when missing). It
    checks ExecStart's binary exists, so the copy points at this venv's `sglang`."""
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: apt-get install -y systemd (make test does this as root)"
    sglang = Path(sys.executable).with_name("sglang")
    assert sglang.exists()
    copy = tmp_path / UNIT.name
    copy.write_text(UNIT.read_text().replace("/opt/sglang-embed/bin/sglang", str(sglang)))
    r = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and not r.stderr.strip() and not r.stdout.strip(), r.stdout + r.stderr
    # It does catch mistakes (so the check above can fail).
    bad = tmp_path / "bad.service"
    bad.write_text(copy.read_text().replace("Restart=on-failure", "Restart=on-fialure"))
    r = subprocess.run([analyze, "verify", str(bad)], capture_output=True, text=True, timeout=60)
    assert "on-fialure" in r.stderr
