"""Portable builds of the CPU kernels, made where a compiler is (an image build) and used where
none is (the running container), on whatever CPU that turns out to be.

The usual build is `-march=native` for the machine it runs on (cpu_kernel_loader.build_kernel).
An image is built on one machine and run on others, so its build step compiles each kernel once
per x86-64 micro-architecture level instead (`x86-64-v4` with AVX-512 BF16, `v4`, `v3` with
AVX2 + FMA, `v2`, and the baseline; on Arm the armv8-a baseline). Without a compiler at run time the
loader picks the best level this CPU's flags allow. Files are named by kernel, level and a hash
of the sources and flags, so a changed kernel never loads a stale build.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

PREBUILT_ENV = "SGLANG_KERNEL_PREBUILT"
DEFAULT_PREBUILT_DIR = Path(__file__).with_name("prebuilt")

_V2 = frozenset({"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"})
_V3 = _V2 | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}
_V4 = _V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}


@dataclass(frozen=True)
class Level:
    name: str
    flags: tuple[str, ...]  # compiler flags
    needs: frozenset  # /proc/cpuinfo flags the CPU must have


# Best first, per machine.
LEVELS: dict[str, tuple[Level, ...]] = {
    "x86_64": (
        Level("x86-64-v4-bf16", ("-march=x86-64-v4", "-mavx512bf16", "-mtune=generic"), _V4 | {"avx512_bf16"}),
        Level("x86-64-v4", ("-march=x86-64-v4", "-mtune=generic"), _V4),
        Level("x86-64-v3", ("-march=x86-64-v3", "-mtune=generic"), _V3),
        Level("x86-64-v2", ("-march=x86-64-v2", "-mtune=generic"), _V2),
        Level("x86-64", ("-march=x86-64", "-mtune=generic"), frozenset()),
    ),
    "aarch64": (Level("armv8-a", ("-march=armv8-a",), frozenset()),),
}
_FALLBACK = (Level("generic", (), frozenset()),)


def levels_for(machine: Optional[str] = None) -> tuple[Level, ...]:
    machine = machine or platform.machine()
    return LEVELS.get({"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine), _FALLBACK)


def cpu_flags() -> frozenset:
    """This CPU's feature flags from /proc/cpuinfo (empty when unreadable)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def supported_levels(flags: frozenset, machine: Optional[str] = None) -> list[Level]:
    """The levels this CPU can run, best first."""
    return [lv for lv in levels_for(machine) if lv.needs <= flags]


def prebuilt_dir() -> Path:
    explicit = os.environ.get(PREBUILT_ENV)
    return Path(explicit) if explicit else DEFAULT_PREBUILT_DIR


def prebuilt_path(directory: Path, stem: str, code: bytes, base_flags: Sequence[str], level: Level) -> Path:
    key = hashlib.sha256(b"\0".join([code, " ".join([*base_flags, *level.flags]).encode()])).hexdigest()[:16]
    return directory / f"{stem}-{level.name}-{key}.so"


def find_prebuilt(
    stem: str, code: bytes, base_flags: Sequence[str], flags: Optional[frozenset] = None
) -> Optional[Path]:
    """The best prebuilt library of this kernel that this CPU can run, or None."""
    directory = prebuilt_dir()
    if not directory.is_dir():
        return None
    for level in supported_levels(cpu_flags() if flags is None else flags):
        path = prebuilt_path(directory, stem, code, base_flags, level)
        if path.is_file():
            return path
    return None


def compile_levels(
    cc: str, base_flags: Sequence[str], sources: Sequence[Path], code: bytes, directory: Path, timeout: float
) -> tuple[list[Path], list[str]]:
    """Compile one kernel at every level of this machine into `directory`: (built, failures)."""
    directory.mkdir(parents=True, exist_ok=True)
    built, failed = [], []
    for level in levels_for():
        target = prebuilt_path(directory, sources[0].stem, code, base_flags, level)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=directory)
        os.close(fd)
        cmd = [cc, *base_flags, *level.flags, *(str(s) for s in sources), "-o", tmp]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            ok, why = done.returncode == 0, (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        except (OSError, subprocess.SubprocessError) as e:
            ok, why = False, str(e)
        if ok:
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
            built.append(target)
        else:
            os.unlink(tmp)
            failed.append(f"{level.name}: {why}")
    return built, failed
