"""Tall, thin images against a tiny CLIP (#27 item 1): tried / failed, with the numbers.

    python benchmark/hostile_inputs/tall_images.py                   # tiny random CLIP, its own servers
    python benchmark/hostile_inputs/tall_images.py --baseline /tmp/main/python   # and older code's

A valid 1 x 200,000 PNG of 1 KB made CLIP's processor resize the short side up to the tower's
size (32 x 6,400,000 pixels) before its crop: the HTTP process went from 406 MB to 2.4 GB; 1 x
1,000,000 ran for minutes (+6 GB). Two servers of a tiny random CLIP
(test/helpers/tiny_image_text.build_tiny_clip), both with the issue's --mm-max-bytes-in-flight
4194304: `default` (aspect ratios over 200 refused) and `raised` (--mm-max-aspect-ratio 1000000,
so the images are decoded and preprocessed). Each request runs while the HTTP process's RSS is
sampled and /health polled (test/helpers/watch.py); a probe passes when the answer is the expected
one in seconds, RSS grows < 300 MB at its peak and < 100 MB after, and /health stays < 1 s.

--baseline DIR serves the python/ directory of older code (e.g. `git archive <commit> python |
tar -x -C /tmp/main`) with the issue's flags and sends it the 1 x 200,000 image only (the
1,000,000 one takes minutes and gigabytes there), to print the before numbers.

`run(ctx)` is the hook for the hostile-input runner: its own server serves a text model, so this
area starts its CLIP servers itself.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from benchmark.hostile_inputs.common import Result, record_numbers, report  # noqa: E402
from benchmark.hostile_inputs.images import post  # noqa: E402
from test.helpers.images import blank_png, data_uri, encode_image, gradient_image  # noqa: E402
from test.helpers.server import ServerProcess  # noqa: E402
from test.helpers.tiny_image_text import build_tiny_clip  # noqa: E402
from test.helpers.watch import Watch, watched  # noqa: E402

AREA = "tall_images"
BUDGET = ["--mm-max-bytes-in-flight", "4194304"]
LENGTHS = (200_000, 1_000_000)
PEAK_MB, AFTER_MB, HEALTH_S = 300, 100, 1.0


def _send(server: ServerProcess, image: bytes) -> Watch:
    """One request of one image, watched; `result` is (status, error message)."""
    items = [{"image": data_uri(image)}]
    return watched(server.base_url, server.proc.pid, lambda: post(server.base_url, items, timeout=600)[:2])


def _verdict(w: Watch, expect: int, time_limit_s: float, message_has: str = "") -> tuple[bool, str]:
    got, message = w.result
    ok = (
        got == expect
        and message_has in message
        and w.elapsed_s < time_limit_s
        and w.peak_growth_mb < PEAK_MB
        and w.growth_mb < AFTER_MB
        and w.health_max_s < HEALTH_S
        and not w.health_failures
    )
    return ok, f"{got}{' (' + message[-60:] + ')' if message else ''}; {w.summary()}"


def _started(*args: str, env: Optional[dict] = None) -> ServerProcess:
    server = ServerProcess(*args, "--log-level", "warning", env=env)
    try:
        status, message, _ = post(server.base_url, [{"image": data_uri(encode_image(gradient_image(40, 30)))}])
        if status != 200:  # the warm-up also starts the image pools, so RSS before is steady
            raise RuntimeError(f"warm-up image answered {status}: {message}")
    except BaseException:
        server.stop()
        raise
    return server


def run_probes(baseline: Optional[str] = None) -> list[Result]:
    results = []
    with tempfile.TemporaryDirectory(prefix="hostile-tall-") as tmp:
        clip_dir = build_tiny_clip(os.path.join(tmp, "clip"))
        thin = {n: blank_png(1, n) for n in LENGTHS}
        if baseline:
            env = {"PYTHONPATH": os.path.abspath(baseline)}
            server = _started("--model-path", clip_dir, *BUDGET, env=env)
            try:
                w = _send(server, thin[200_000])
                results.append(Result(AREA, f"[{baseline}] 1x200000 PNG", True, f"{w.result}; {w.summary()}"))
            finally:
                server.stop()
        server = _started("--model-path", clip_dir, *BUDGET)
        try:
            for n in LENGTHS:
                w = _send(server, thin[n])
                ok, detail = _verdict(w, 400, 3.0, "over the limit of 200:1 (--mm-max-aspect-ratio)")
                results.append(Result(AREA, f"1x{n} PNG ({len(thin[n])} B) refused from its header", ok, detail))
            w = _send(server, encode_image(gradient_image(1, 150)))
            ok, detail = _verdict(w, 200, 3.0)
            results.append(Result(AREA, "1x150 PNG (aspect under the limit) served", ok, detail))
        finally:
            server.stop()
        server = _started("--model-path", clip_dir, *BUDGET, "--mm-max-aspect-ratio", "1000000")
        try:
            for n in LENGTHS:
                w = _send(server, thin[n])
                ok, detail = _verdict(w, 200, 10.0)
                results.append(Result(AREA, f"1x{n} PNG served under --mm-max-aspect-ratio 1000000", ok, detail))
        finally:
            server.stop()
    return results


def run(ctx: Optional[object] = None) -> list[Result]:
    """The runner's hook: this area's results (their details go to ctx.numbers when it has them)."""
    return record_numbers(ctx, AREA, run_probes())


def main(argv: Optional[list[str]] = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", metavar="DIR", help="also serve this python/ directory of older code")
    args = parser.parse_args(argv)
    return report(run_probes(args.baseline))


if __name__ == "__main__":
    sys.exit(main())
