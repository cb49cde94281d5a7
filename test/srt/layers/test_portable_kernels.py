"""Kernels compiled at image build time for every CPU level and picked at run time by a machine
without a compiler (layers/attention/portable_kernels.py, cpu_kernel_loader.prebuild)."""

from __future__ import annotations

import pytest

from sglang.srt.layers import prebuild_kernels
from sglang.srt.layers.attention import cpu_kernel_loader as loader
from sglang.srt.layers.attention import portable_kernels as pk
from sglang.srt.layers.int8_rows_kernel import load_int8_rows_kernel

AVX2_FMA = pk._V3  # this machine: AVX2 + FMA, no AVX-512
AVX512_BF16 = pk._V4 | {"avx512_bf16"}


def test_best_level_this_cpu_can_run_comes_first():
    assert [lv.name for lv in pk.supported_levels(AVX2_FMA, "x86_64")] == ["x86-64-v3", "x86-64-v2", "x86-64"]
    assert pk.supported_levels(AVX512_BF16, "x86_64")[0].name == "x86-64-v4-bf16"
    assert pk.supported_levels(pk._V4, "x86_64")[0].name == "x86-64-v4"
    assert [lv.name for lv in pk.supported_levels(frozenset(), "x86_64")] == ["x86-64"]
    assert [lv.name for lv in pk.supported_levels(frozenset(), "arm64")] == ["armv8-a"]
    assert [lv.name for lv in pk.supported_levels(frozenset(), "riscv64")] == ["generic"]


def test_names_change_with_the_sources_and_flags(tmp_path):
    level = pk.levels_for("x86_64")[2]
    a = pk.prebuilt_path(tmp_path, "k", b"code", ["-O3"], level)
    assert a.name.startswith("k-x86-64-v3-") and a.suffix == ".so"
    assert a != pk.prebuilt_path(tmp_path, "k", b"code2", ["-O3"], level)
    assert a != pk.prebuilt_path(tmp_path, "k", b"code", ["-O2"], level)


@pytest.mark.slow
@pytest.mark.skipif(loader.find_compiler() is None, reason="needs a C compiler")
def test_prebuilt_kernel_loads_where_no_compiler_is(monkeypatch, tmp_path):
    flags = pk.cpu_flags()
    best = pk.supported_levels(flags)[0]
    monkeypatch.setattr(pk, "levels_for", lambda machine=None: (best,))  # one level keeps the test short
    assert prebuild_kernels.main([str(tmp_path / "prebuilt")]) == 0  # what the images run
    built = sorted((tmp_path / "prebuilt").iterdir())
    assert [p.name.split("-")[0] for p in built] == ["int8_rows", "varlen_attention"]  # no temporaries
    monkeypatch.setenv("SGLANG_KERNEL_PREBUILT", str(tmp_path / "prebuilt"))
    monkeypatch.setenv("SGLANG_KERNEL_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(loader, "find_compiler", lambda: None)
    result = loader.build_kernel()
    assert result.path == built[1], result.reason
    kernel, why = loader.load_kernel()
    assert kernel is not None, why
    int8_kernel, why = load_int8_rows_kernel()
    assert int8_kernel is not None, why
    # A CPU that can run none of the builds, or a changed kernel source, finds nothing.
    monkeypatch.setattr(pk, "cpu_flags", lambda: frozenset())
    if best.needs:
        assert loader.build_kernel().path is None
    assert pk.find_prebuilt("varlen_attention", b"other source", loader.BASE_FLAGS, flags) is None
