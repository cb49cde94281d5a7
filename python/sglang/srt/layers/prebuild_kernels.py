"""`python -m sglang.srt.layers.prebuild_kernels [DIR]`: compile every CPU kernel of the package
(the varlen attention kernel and the int8 layers' row kernel) once per CPU level into DIR
(default: $SGLANG_KERNEL_PREBUILT, else the package's prebuilt/ folder), for images that run
without a compiler (docs/cpu.md, docker/Dockerfile.cpu)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Optional, Sequence

from sglang.srt.layers.attention.cpu_kernel_loader import HEADERS, SOURCES, KernelSources, prebuild
from sglang.srt.layers.int8_rows_kernel import HEADERS as INT8_ROWS_HEADERS
from sglang.srt.layers.int8_rows_kernel import SOURCE as INT8_ROWS_SOURCE

ALL_KERNELS: tuple[KernelSources, ...] = ((SOURCES, HEADERS), ((INT8_ROWS_SOURCE,), INT8_ROWS_HEADERS))


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sglang.srt.layers.prebuild_kernels", description=__doc__)
    parser.add_argument("directory", nargs="?", default=None, metavar="DIR", help="where the builds go")
    cli = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for path in prebuild(Path(cli.directory) if cli.directory else None, ALL_KERNELS):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
