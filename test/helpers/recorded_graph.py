"""A CPU stand-in for CUDA-graph capture: record every tensor op at capture, re-run them at replay.

Like a real graph, a replay re-executes the captured kernels on whatever the captured tensors hold
*now* and writes into the tensors the capture produced; nothing the Python code did at capture time
is re-run. So a runner that forgets to copy an input into its static buffers, reads a result from
the wrong tensor, or keeps a per-batch value in Python, gets wrong vectors on CPU too. Ops a real
capture refuses (a host sync, data-dependent shapes) raise here as well.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# Ops that would read device values on the host or give data-dependent shapes: illegal in capture.
_REFUSED = {"item", "_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique2"}


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype


class RecordedGraph(TorchDispatchMode):
    """One captured segment: the ops it ran, with the very tensors they read and wrote."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple] = []
        self.replays = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.overloadpacket.__name__ in _REFUSED:
            raise RuntimeError(f"{func} is not allowed while capturing a graph (host sync or dynamic shape)")
        out = func(*args, **kwargs)
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        self.ops.append((func, args, kwargs, outs))
        return out

    def replay(self) -> None:
        for func, args, kwargs, outs in self.ops:
            fresh = [t for t in tree_flatten(func(*args, **kwargs))[0] if isinstance(t, torch.Tensor)]
            for dst, src in zip(outs, fresh):
                if not _same_view(dst, src):  # views and in-place results already are the tensor
                    dst.copy_(src)
        self.replays += 1


class RecordingCapture:
    """`SegmentCapture` for BreakableGraphRunner on CPU: each segment becomes a RecordedGraph."""

    def __init__(self) -> None:
        self._open: Optional[RecordedGraph] = None
        self.graphs: list[RecordedGraph] = []
        self.warmups = 0

    def warmup(self, fn: Callable[[], torch.Tensor]) -> None:
        fn()
        self.warmups += 1

    def begin(self) -> None:
        assert self._open is None, "a segment is already being captured"
        self._open = RecordedGraph()
        self._open.__enter__()

    def end(self) -> RecordedGraph:
        graph, self._open = self._open, None
        assert graph is not None, "no segment is being captured"
        graph.__exit__(None, None, None)
        self.graphs.append(graph)
        return graph

    @property
    def replays(self) -> int:
        return sum(g.replays for g in self.graphs)
