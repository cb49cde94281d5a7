"""The compiled CPU varlen attention kernel and its backend, against a float64 per-sequence reference.

Runs wherever a C compiler is found (every machine this project's CI uses); without one the server
uses torch_native, which test_attention_backends covers, and the selection tests there cover the
fallback itself.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from sglang.srt.layers.attention.cpu_kernel_loader import find_compiler, load_kernel
from sglang.srt.layers.attention.cpu_varlen_backend import CpuVarlenAttnBackend
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from test.helpers.attention_cases import (
    CASES,
    LENGTHS,
    check_backend,
    check_layers_with_different_masks,
    make_batch,
    make_inputs,
    make_layer,
    reference_attention,
)
from test.helpers.kernel_isa import ISAS, load_for_isa

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler (cc, gcc or clang)")


@pytest.fixture(scope="module", params=ISAS)
def kernel(request):
    built, why = load_for_isa(load_kernel, request.param)
    assert built is not None, why
    return built


def _cu(seq_lens):
    return torch.tensor([0] + list(torch.tensor(seq_lens).cumsum(0).tolist()), dtype=torch.int32)


def _run(kernel, q, k, v, seq_lens, heads, kv_heads, head_dim, causal=False, window=None, **kw):
    out = torch.empty(q.shape[0], heads * head_dim, dtype=q.dtype)
    return kernel(
        q,
        k,
        v,
        out,
        _cu(seq_lens),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        scale=head_dim**-0.5,
        causal=causal,
        window=window,
        **kw,
    )


def _error(out, q, k, v, seq_lens, heads, kv_heads, head_dim, causal=False, window=None) -> float:
    ref = reference_attention(q, k, v, seq_lens, heads, kv_heads, head_dim, causal, window, head_dim**-0.5)
    return float((out.double() - ref).abs().max())


# ----- the backend, through AttentionLayer and ForwardBatch -----
@pytest.mark.parametrize("lengths", sorted(LENGTHS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_float32_matches_reference(kernel, case, lengths):
    check_backend(CpuVarlenAttnBackend(kernel), case, lengths)


@pytest.mark.parametrize("case", sorted(CASES))
def test_bfloat16_is_as_close_as_torch_sdpa(kernel, case):
    """bf16 inputs: no further from the float64 reference than torch's own kernel, plus one bf16 step."""
    heads, kv_heads, d, causal, window = CASES[case]
    seq_lens = [5, 1, 40, 3, 70]
    layer = make_layer(heads, kv_heads, d, causal, window)
    q, k, v = make_inputs(seq_lens, heads, kv_heads, d, seed=1, dtype=torch.bfloat16)
    ref = reference_attention(q, k, v, seq_lens, heads, kv_heads, d, causal, window, layer.scaling)
    ours = layer(q, k, v, make_batch(seq_lens, CpuVarlenAttnBackend(kernel)))
    sdpa = layer(q, k, v, make_batch(seq_lens, TorchNativeAttnBackend()))
    assert ours.dtype == torch.bfloat16
    ours_err, sdpa_err = (float((x.double() - ref).abs().max()) for x in (ours, sdpa))
    assert ours_err <= sdpa_err + 2**-8, (ours_err, sdpa_err)


@pytest.mark.parametrize("case", sorted(CASES))
def test_long_sequences_go_to_sdpa_in_the_same_layer(kernel, case):
    """With a limit of 6 tokens, the 9- and 12-token sequences of the mix run through SDPA."""
    check_backend(CpuVarlenAttnBackend(kernel, max_kernel_len=6), case, "mixed")


def test_default_limits_by_dtype(kernel):
    assert CpuVarlenAttnBackend.for_dtype(kernel, torch.float32).max_kernel_len == 256
    assert CpuVarlenAttnBackend.for_dtype(kernel, torch.bfloat16).max_kernel_len == 512
    backend = CpuVarlenAttnBackend.for_dtype(kernel, torch.float32)
    check_backend(backend, "gqa_causal", [300, 7, 256, 257, 1])  # 300 and 257 take the SDPA path
    fb = make_batch([300, 7, 256, 257, 1], backend)
    assert [g.span for g in fb.attn_metadata] == [(0, 300), (563, 820)]


def test_custom_scaling(kernel):
    check_backend(CpuVarlenAttnBackend(kernel), "bidirectional", "mixed", scaling=0.05)


def test_layers_with_different_masks_share_a_batch(kernel):
    check_layers_with_different_masks(CpuVarlenAttnBackend(kernel))


def test_backend_copies_rows_that_are_not_dense(kernel):
    heads, d, seq_lens = 2, 16, [4, 6]
    q, k, v = make_inputs(seq_lens, heads, heads, d, seed=4)
    q_cols = q.t().contiguous().t()  # same values, column-major: rows are not dense
    layer = make_layer(heads, heads, d, False, None)
    out = layer(q_cols, k, v, make_batch(seq_lens, CpuVarlenAttnBackend(kernel)))
    ref = reference_attention(q, k, v, seq_lens, heads, heads, d, False, None, layer.scaling)
    assert torch.allclose(out.double(), ref, atol=1e-5)


# ----- the kernel itself: shapes, layouts and work splitting -----
@pytest.mark.parametrize("head_dim", [7, 8, 32, 80, 128, 256])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_head_dims(kernel, head_dim, dtype):
    """Odd sizes, sizes that are not whole vectors (8, 80) and the big ones (Qwen 128, Gemma 256)."""
    seq_lens, heads, kv_heads = [3, 17, 33], 4, 2
    q, k, v = make_inputs(seq_lens, heads, kv_heads, head_dim, seed=head_dim, dtype=dtype)
    out = _run(kernel, q, k, v, seq_lens, heads, kv_heads, head_dim, causal=True)
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    assert _error(out, q, k, v, seq_lens, heads, kv_heads, head_dim, causal=True) < tol


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_strided_slices_of_a_fused_projection(kernel, dtype):
    """q, k and v as column slices of one [T, (H + 2 Hk) * D] tensor, as models split a fused qkv."""
    seq_lens, heads, kv_heads, d = [9, 30, 2], 6, 2, 32
    t = sum(seq_lens)
    qkv = torch.randn(t, (heads + 2 * kv_heads) * d, generator=torch.Generator().manual_seed(5)).to(dtype)
    q, k, v = qkv.split([heads * d, kv_heads * d, kv_heads * d], dim=1)
    assert q.stride(0) == qkv.shape[1]
    out = _run(kernel, q, k, v, seq_lens, heads, kv_heads, d)
    dense = _run(kernel, q.contiguous(), k.contiguous(), v.contiguous(), seq_lens, heads, kv_heads, d)
    assert torch.equal(out, dense)
    assert _error(out, q, k, v, seq_lens, heads, kv_heads, d) < (1e-5 if dtype == torch.float32 else 3e-2)


@pytest.mark.slow
@pytest.mark.parametrize("causal,window", [(False, None), (True, None), (False, 100), (True, 64)])
def test_long_sequence_split_over_threads(kernel, causal, window):
    """One 1000-token sequence is cut into row blocks (and heads) so that every thread gets work."""
    seq_lens, heads, kv_heads, d = [1000], 4, 2, 32
    q, k, v = make_inputs(seq_lens, heads, kv_heads, d, seed=6)
    outs = [_run(kernel, q, k, v, seq_lens, heads, kv_heads, d, causal, window, num_threads=n) for n in (1, 2, 3)]
    assert _error(outs[0], q, k, v, seq_lens, heads, kv_heads, d, causal, window) < 1e-5
    for other in outs[1:]:
        assert torch.allclose(other, outs[0], atol=1e-6)


def test_many_sequences_take_whole_sequence_items(kernel):
    """With at least four sequences per thread an item takes a whole sequence (up to 512 rows)."""
    seq_lens, heads, d = [600, 7, 300, 1, 45, 512, 2, 90, 13], 2, 16
    q, k, v = make_inputs(seq_lens, heads, heads, d, seed=7)
    out = _run(kernel, q, k, v, seq_lens, heads, heads, d, num_threads=2)
    assert _error(out, q, k, v, seq_lens, heads, heads, d) < 1e-5


def test_sequences_over_max_seq_len_are_left_untouched(kernel):
    seq_lens, heads, d = [4, 20, 3], 2, 16
    q, k, v = make_inputs(seq_lens, heads, heads, d, seed=9)
    out = torch.full((sum(seq_lens), heads * d), 7.0)
    kernel(
        q,
        k,
        v,
        out,
        _cu(seq_lens),
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=d,
        scale=d**-0.5,
        causal=False,
        window=None,
        max_seq_len=10,
    )
    assert torch.all(out[4:24] == 7.0)
    ref = reference_attention(q, k, v, seq_lens, heads, heads, d, False, None, d**-0.5)
    for rows in (slice(0, 4), slice(24, 27)):
        assert torch.allclose(out[rows].double(), ref[rows], atol=1e-5)


def test_tiny_scratch_budget_still_covers_every_head(kernel):
    seq_lens, heads, kv_heads, d = [20, 50], 8, 4, 16
    q, k, v = make_inputs(seq_lens, heads, kv_heads, d, seed=8)
    out = _run(kernel, q, k, v, seq_lens, heads, kv_heads, d, scratch_budget=1)
    assert _error(out, q, k, v, seq_lens, heads, kv_heads, d) < 1e-5


def test_empty_batch(kernel):
    q = torch.empty(0, 32)
    out = _run(kernel, q, q, q, [], 2, 2, 16)
    assert out.shape == (0, 32)


def test_rejects_what_it_cannot_read(kernel):
    q, k, v = make_inputs([4], 2, 2, 16)
    with pytest.raises(ValueError, match="float32 and bfloat16"):
        _run(kernel, q.half(), k.half(), v.half(), [4], 2, 2, 16)
    with pytest.raises(ValueError, match="dense rows"):
        _run(kernel, q.t().contiguous().t(), k, v, [4], 2, 2, 16)
    with pytest.raises(ValueError, match="q's dtype"):
        _run(kernel, q, k.bfloat16(), v, [4], 2, 2, 16)
    with pytest.raises(ValueError, match="shapes do not match"):
        _run(kernel, q, k[:, :16], v[:, :16], [4], 2, 2, 16)
    with pytest.raises(ValueError, match="head layout"):
        _run(kernel, q, k, v, [4], 2, 3, 16)
    with pytest.raises(ValueError, match="int32 CPU tensor"):
        kernel(
            q,
            k,
            v,
            torch.empty_like(q),
            torch.tensor([0, 4]),
            num_heads=2,
            num_kv_heads=2,
            head_dim=16,
            scale=0.25,
            causal=False,
            window=None,
        )
    with pytest.raises(ValueError, match=r"within \[0, 4\]"):
        _run(kernel, q, k, v, [3, 2], 2, 2, 16)  # rows 3..5 of a 4-row batch


OUT_OF_MEMORY = """
import resource, torch
from sglang.srt.layers.attention.cpu_kernel_loader import load_kernel
kernel, why = load_kernel()
assert kernel is not None, why
torch.set_num_threads(2)
L, H, D = 65536, 2, 128  # one sequence: ~64 MiB of staged keys and values per kv head and thread
q = torch.randn(L, H * D)
out = torch.empty_like(q)
(q @ q[:256].t()).sum()  # start torch's OpenMP threads before the limit
vsz = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (vsz + (64 << 20), resource.RLIM_INFINITY))
try:
    kernel(q, q, q, out, torch.tensor([0, L], dtype=torch.int32), num_heads=H, num_kv_heads=H, head_dim=D, scale=0.1,
           causal=False, window=None)
except MemoryError as e:
    print("MemoryError:", e)
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses RLIMIT_AS and /proc")
def test_scratch_allocation_failure_is_a_memory_error_not_a_hang():
    """Threads whose scratch cannot be allocated still reach the shared loop; the call reports it."""
    done = subprocess.run([sys.executable, "-c", OUT_OF_MEMORY], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "MemoryError: the CPU attention kernel could not allocate its scratch memory" in done.stdout
