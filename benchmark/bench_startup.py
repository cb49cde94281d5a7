"""How long a server takes to start, answer and stop, per checkout (A/B), alternated by round.

    python benchmark/bench_startup.py --rounds 5 --variant before=/tmp/wt_before/python --variant after=python
        [--server-args "--quantization int8"]

Each round starts one server per --variant (`python -m sglang.launch_server` with that checkout's
python/ first on PYTHONPATH, one after another, never two at once) and times, from the moment the
command is started: /health answering 200 (polled every 20 ms), the first /v1/embeddings answer, and
the process's exit after SIGTERM. A bad model path (`--model-path /nonexistent`) is timed to its
one-line error's exit as well: the model check stays the start-up's first word on a bad model, so it
must not get slower. Then `sglang.Engine()` in a fresh interpreter, to ready. Medians per variant,
and each later variant's median against the first's.

The suite starts dozens of servers, so start-up is also where the test suite's time goes.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_serving  # noqa: E402
from bench_http_cpu import free_port, variant_env  # noqa: E402


def post_embedding(base: str, timeout: float) -> int:
    body = json.dumps({"input": "how long does a server take to start"}).encode()
    req = urllib.request.Request(base + "/v1/embeddings", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status


def one_start(env: dict[str, str], server_args: list[str], timeout: float) -> dict[str, float]:
    """Seconds from the command's start to healthy, to the first embedding, and SIGTERM to exit."""
    port = free_port()
    cmd = [sys.executable, "-m", "sglang.launch_server", "--port", str(port), "--log-level", "warning", *server_args]
    base = f"http://127.0.0.1:{port}"
    began = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        while proc.poll() is None and time.monotonic() - began < timeout:
            try:
                if bench_serving.http_get(base + "/health", 1.0)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.02)
        else:
            raise SystemExit(f"{shlex.join(cmd)} did not become healthy:\n{proc.stderr.read().decode()[-2000:]}")
        healthy = time.monotonic() - began
        assert post_embedding(base, 30.0) == 200
        first = time.monotonic() - began
        stop_began = time.monotonic()
        proc.terminate()
        proc.wait(timeout=60)
        return {"healthy_s": healthy, "first_embedding_s": first, "stop_s": time.monotonic() - stop_began}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()


def bad_model(env: dict[str, str], timeout: float) -> float:
    """Seconds to the exit (code 2) of a server given a model path that does not exist."""
    cmd = [sys.executable, "-m", "sglang.launch_server", "--port", str(free_port()), "--model-path", "/nonexistent"]
    began = time.monotonic()
    out = subprocess.run(cmd, env=env, capture_output=True, timeout=timeout)
    if out.returncode != 2:
        raise SystemExit(f"bad model path: exit {out.returncode}, expected 2:\n{out.stderr.decode()[-2000:]}")
    return time.monotonic() - began


ENGINE_PROGRAM = """
import time
began = time.monotonic()
import sglang
if __name__ == "__main__":
    engine = sglang.Engine()
    ready = time.monotonic() - began
    engine.encode("how long does an engine take to start")
    print(ready, time.monotonic() - began)
    engine.shutdown()
"""


def engine_start(env: dict[str, str], timeout: float) -> dict[str, float]:
    """`sglang.Engine()` in a fresh interpreter: seconds from its first line to ready, to the first
    encode (the offline engine checks the model in the caller's process)."""
    out = subprocess.run([sys.executable, "-c", ENGINE_PROGRAM], env=env, capture_output=True, timeout=timeout)
    if out.returncode != 0:
        raise SystemExit(f"Engine start failed:\n{out.stderr.decode()[-2000:]}")
    ready, first = (float(x) for x in out.stdout.split())
    return {"engine_ready_s": ready, "engine_first_encode_s": first}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", action="append", required=True, help="NAME=PATH of a checkout's python/")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--server-args", default="", help="more flags for every server")
    p.add_argument("--timeout", type=float, default=180.0)
    p.add_argument("--output-json", default=None)
    args = p.parse_args()
    variants = [v.split("=", 1) for v in args.variant]
    rows: dict[str, list[dict[str, float]]] = {name: [] for name, _ in variants}
    for r in range(args.rounds):
        for name, path in variants:
            env = variant_env(path)
            row = one_start(env, shlex.split(args.server_args), args.timeout)
            row["bad_model_s"] = bad_model(env, args.timeout)
            row.update(engine_start(env, args.timeout))
            rows[name].append(row)
            print(f"round {r + 1} [{name}] " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()), flush=True)
    keys = ("healthy_s", "first_embedding_s", "stop_s", "bad_model_s", "engine_ready_s")
    print(f"\nmedians over {args.rounds} rounds, seconds (CPUs: {os.cpu_count()}); x = against {variants[0][0]}")
    print(f"{'variant':<10}" + "".join(f"{k:>22}" for k in keys))
    base = {k: statistics.median(row[k] for row in rows[variants[0][0]]) for k in keys}
    for name, _ in variants:
        med = {k: statistics.median(row[k] for row in rows[name]) for k in keys}
        print(f"{name:<10}" + "".join(f"{f'{med[k]:.2f} ({med[k] / base[k]:.2f}x)':>22}" for k in keys))
    # A stop is quick or waits for a timeout: its worst case says more than its median.
    print("slowest stop: " + ", ".join(f"{name} {max(r['stop_s'] for r in rows[name]):.2f} s" for name, _ in variants))
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
