"""Run every hostile-input area against a server on loopback and print tried / failed.

    python -m benchmark.hostile_inputs                 # starts its own server (bundled model)
    python -m benchmark.hostile_inputs --url http://127.0.0.1:30000 [--api-key K]   # an existing one

Its own server runs with small limits so that every probe is quick (the flags below); against an
existing server the probes that stop a process are skipped. Loopback only, every wait bounded.
Exit status 1 when any probe failed.
"""

from __future__ import annotations

import argparse
import importlib
import ipaddress
import os
import pkgutil
import signal
import subprocess
import sys
import time
import urllib.parse

import benchmark.hostile_inputs as package
from benchmark.hostile_inputs.common import Context, Result, start_server

SERVER_FLAGS = [
    "--tokenizer-worker-num", "2", "--max-batch-size", "4",
    "--max-header-bytes", "16384", "--header-timeout", "2", "--body-timeout", "2",
    "--max-connections", "64", "--watchdog-timeout", "2", "--watchdog-exit-timeout", "8",
]  # fmt: skip


def areas() -> list:
    """Every module of the package with a `run(ctx)`, destructive ones (DESTRUCTIVE = True) last."""
    mods = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_") or info.name == "common":
            continue
        mod = importlib.import_module(f"{package.__name__}.{info.name}")
        if callable(getattr(mod, "run", None)):
            mods.append(mod)
    return sorted(mods, key=lambda m: (getattr(m, "DESTRUCTIVE", False), m.__name__))


def summarize(results: list[Result], numbers: dict) -> str:
    lines = [f"{'area':<12} {'probe':<62} result"]
    for r in results:
        verdict = "skipped" if r.skipped else "ok" if r.ok else "FAILED"
        lines.append(f"{r.area:<12} {r.probe[:62]:<62} {verdict}  {r.detail[:80] if not r.ok or r.skipped else ''}")
    for key, val in numbers.items():
        lines.append(f"  {key}: {val}")
    failed = sum(not r.ok for r in results)
    skipped = sum(r.skipped for r in results)
    lines.append(f"tried {len(results) - skipped}, failed {failed}" + (f", skipped {skipped}" if skipped else ""))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="probe this running server instead of starting one (loopback only)")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--only", nargs="*", help="area names to run (default: all)")
    ap.add_argument("--server-arg", action="append", default=[], help="extra flag for the started server")
    args = ap.parse_args(argv)
    proc = log = None
    if args.url:
        url = urllib.parse.urlparse(args.url)
        host = (url.hostname or "").strip("[]")
        if host != "localhost" and not ipaddress.ip_address(host).is_loopback:
            raise SystemExit("--url must be a loopback address: these probes attack the server")
        port = url.port or 80
        base = f"{url.scheme}://{url.netloc}"
    else:
        proc, port, log = start_server(SERVER_FLAGS + args.server_arg)
        base = f"http://127.0.0.1:{port}"
    ctx = Context(base_url=base, port=port, proc=proc, log_path=log, api_key=args.api_key)
    results: list[Result] = []
    try:
        for mod in areas():
            name = mod.__name__.rsplit(".", 1)[1]
            if args.only and name not in args.only:
                continue
            t0 = time.monotonic()
            try:
                results += mod.run(ctx)
            except Exception as e:
                results.append(Result(name, "area crashed", False, f"{type(e).__name__}: {e}"))
            ctx.numbers[f"{name}: wall time (s)"] = round(time.monotonic() - t0, 1)
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    print(summarize(results, ctx.numbers))
    return 1 if any(not r.ok for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
