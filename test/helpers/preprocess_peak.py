"""Peak memory of a model's image preprocessing (or of decoding an image), measured in a fresh
process, beside its estimate.

    python -m test.helpers.preprocess_peak '{"kind": "tower", "model_dir": ..., "sizes": [[w, h], ...]}'

prints one JSON list of {"size", "measured", "estimate", "pixels"} (bytes; `pixels`: the
estimate's largest image); with `{"kind": "decode", "path": ..., "cap": ...}` one
{"mode", "measured", "estimate"} for decoding an encoded image file. The peak is the rise of the
process's resident high-water mark (VmHWM, reset through /proc/self/clear_refs) over its resident
size just before the call, with the freed heap given back to the system first, so memory reused
from an earlier call cannot hide a peak.
`measure` / `measure_decode` run it in a subprocess (one import of transformers for every size), away
from whatever else the test process holds or its other threads allocate meanwhile.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import json
import os
import subprocess
import sys
from typing import Callable, Optional, TypeVar

T = TypeVar("T")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _trim() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


def peak_bytes(fn: Callable[[], T]) -> tuple[T, int]:
    """fn's result and the rise of this process's resident high-water mark while it ran (over the
    resident size just before, with the freed heap given back to the system first)."""
    _trim()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current resident size
    before = _status_kb("VmRSS")
    result = fn()
    return result, (_status_kb("VmHWM") - before) * 1024


def _preprocessor(kind: str, model_dir: str, max_pixels: Optional[int]):
    if kind == "qwen2vl":
        from sglang.srt.frontend.multimodal.processors import Qwen2VLImages

        return Qwen2VLImages(model_dir, max_pixels=max_pixels)
    from sglang.srt.frontend.multimodal.tower_images import TowerImages

    with open(os.path.join(model_dir, "config.json")) as f:
        patch = json.load(f)["vision_config"]["patch_size"]
    return TowerImages(model_dir, patch, class_token=kind == "clip")


def _run(spec: dict) -> list[dict]:
    from test.helpers.images import gradient_image

    images = _preprocessor(spec["kind"], spec["model_dir"], spec.get("max_pixels"))
    images(gradient_image(40, 30))  # the first call's one-off allocations are not the image's
    out = []
    for width, height in spec["sizes"]:
        image = gradient_image(width, height)
        (pixels, _), measured = peak_bytes(functools.partial(images, image))
        cost = images.preprocess_cost(height, width)
        out.append({"size": [width, height], "measured": measured, "estimate": cost.nbytes, "pixels": cost.pixels})
        del pixels, image
    return out


def _decode(spec: dict) -> dict:
    from sglang.srt.frontend.multimodal.image_decode import decode_image, open_image

    with open(spec["path"], "rb") as f:
        opened = open_image(f.read(), spec["cap"])
    image, measured = peak_bytes(lambda: decode_image(opened))
    return {"mode": image.mode, "measured": measured, "estimate": opened.decode_cost}


def measure(kind: str, model_dir: str, sizes: list[tuple[int, int]], max_pixels: Optional[int] = None) -> list[dict]:
    """[(width, height) -> measured peak and estimate] for `kind` ('clip', 'siglip', 'qwen2vl')."""
    return _in_fresh_process(
        {"kind": kind, "model_dir": model_dir, "sizes": [list(s) for s in sizes], "max_pixels": max_pixels}
    )


def measure_decode(path: str, cap: int) -> dict:
    """{"mode", "measured", "estimate"}: decoding the encoded image in `path` (image_decode.open_image
    with pixel cap `cap`, then decode_image), its peak beside its reserved decode_cost."""
    return _in_fresh_process({"kind": "decode", "path": path, "cap": cap})


def _in_fresh_process(spec: dict):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "python")])}
    proc = subprocess.run(
        [sys.executable, "-m", "test.helpers.preprocess_peak", json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the measuring process failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    print(json.dumps(_decode(spec) if spec["kind"] == "decode" else _run(spec)))
