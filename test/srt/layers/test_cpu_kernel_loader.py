"""Building, caching and failing to build the C attention kernel (cpu_kernel_loader)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys

import pytest

from sglang.srt.layers.attention import cpu_kernel_loader as loader

needs_compiler = pytest.mark.skipif(loader.find_compiler() is None, reason="needs a C compiler")


@pytest.fixture
def cache(monkeypatch, tmp_path):
    path = tmp_path / "kernels"
    monkeypatch.setenv("SGLANG_KERNEL_CACHE", str(path))
    return path


@pytest.mark.slow
@needs_compiler
def test_builds_once_then_reuses_the_cached_library_without_a_compiler(cache, monkeypatch):
    first = loader.build_kernel()
    assert first.path is not None and first.path.parent == cache and first.path.exists(), first.reason
    assert [p.name for p in cache.iterdir()] == [first.path.name]  # no temporary files left behind

    def no_compiling(*args, **kwargs):
        raise AssertionError("the cached library should have been used")

    monkeypatch.setattr(loader.subprocess, "run", no_compiling)
    monkeypatch.setattr(loader, "find_compiler", lambda: None)  # none needed once built
    assert loader.build_kernel().path == first.path


@pytest.mark.slow
@needs_compiler
def test_changed_source_gets_its_own_library(cache, tmp_path):
    copies, layers = [], loader.CSRC.parent.parent  # kept in their folders: the includes are relative
    for src in loader.SOURCES + loader.HEADERS:
        dst = tmp_path / src.relative_to(layers)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dst)
        copies.append(dst)
    sources, headers = tuple(copies[: len(loader.SOURCES)]), tuple(copies[len(loader.SOURCES) :])
    original = loader.build_kernel(sources, headers)
    with open(sources[0], "a") as f:
        f.write("\n/* a change */\n")
    changed = loader.build_kernel(sources, headers)
    assert original.path and changed.path and original.path != changed.path


def test_no_compiler_is_a_reason_not_an_exception(cache, monkeypatch):
    monkeypatch.setattr(loader, "find_compiler", lambda: None)
    built = loader.build_kernel()
    assert built.path is None and "no C compiler" in built.reason
    kernel, why = loader.load_kernel()
    assert kernel is None and "no C compiler" in why


def test_failing_compiler_is_reported_and_leaves_nothing(cache, monkeypatch, tmp_path):
    fake = tmp_path / "fake-cc"
    fake.write_text("#!/bin/sh\necho 'fatal: boom' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CC", str(fake))
    assert loader.find_compiler() == str(fake)
    built = loader.build_kernel()
    assert built.path is None
    assert "compiling the CPU attention kernel failed" in built.reason and "boom" in built.reason
    assert list(cache.iterdir()) == []


def test_unwritable_cache_is_a_reason(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SGLANG_KERNEL_CACHE", str(blocker / "kernels"))
    built = loader.build_kernel()
    if loader.find_compiler() is None:
        assert "no C compiler" in built.reason
    else:
        assert built.path is None and "not writable" in built.reason


@needs_compiler
def test_read_only_cache_is_a_reason(cache, monkeypatch):
    cache.mkdir(parents=True)

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(loader.tempfile, "mkstemp", refuse)  # chmod does not stop root, which CI may be
    built = loader.build_kernel()
    assert built.path is None and "not writable" in built.reason


def test_cache_dir_defaults(monkeypatch, tmp_path):
    monkeypatch.delenv("SGLANG_KERNEL_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert loader.cache_dir() == tmp_path / "sglang-embed" / "kernels"
    monkeypatch.setenv("SGLANG_KERNEL_CACHE", str(tmp_path / "x"))
    assert loader.cache_dir() == tmp_path / "x"


@pytest.mark.slow
@needs_compiler
def test_library_is_usable_from_a_fresh_process(cache):
    """The scheduler process loads what an earlier process built (the usual case after the first run)."""
    built = loader.build_kernel()
    code = (
        "import torch\nfrom sglang.srt.layers.attention.cpu_kernel_loader import load_kernel\n"
        "k, why = load_kernel()\nassert k is not None, why\nprint(k.path)\n"
    )
    env = dict(os.environ, SGLANG_KERNEL_CACHE=str(cache))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(built.path)


def test_unknown_forced_isa_is_a_reason(cache, monkeypatch):
    monkeypatch.setenv(loader.ISA_ENV, "avx9000")
    built = loader.build_kernel()
    assert built.path is None and "SGLANG_KERNEL_ISA='avx9000'" in built.reason and "native" in built.reason


@pytest.mark.slow
@needs_compiler
@pytest.mark.skipif(loader.platform.machine() != "x86_64", reason="x86-64 levels")
def test_forced_isa_builds_its_own_library_without_wider_vectors(cache, monkeypatch):
    """SGLANG_KERNEL_ISA=x86-64-v3 (what an AVX2 machine runs) on any x86-64 CPU: a library of its
    own beside the native one, with no AVX-512 (zmm) instruction in it."""
    native = loader.build_kernel()
    monkeypatch.setenv(loader.ISA_ENV, "x86-64-v3")
    avx2 = loader.build_kernel()
    assert native.path and avx2.path and native.path != avx2.path, avx2.reason
    objdump = loader.shutil.which("objdump")
    if objdump:
        text = subprocess.run([objdump, "-d", str(avx2.path)], capture_output=True, text=True, check=True).stdout
        assert "ymm" in text and "zmm" not in text
    monkeypatch.setenv(loader.ISA_ENV, "native")
    assert loader.build_kernel().path == native.path
