"""`python -m sglang.launch_server ...`: the same flags as `sglang serve`."""

import sys

from sglang.cli import serve

if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:], prog="python -m sglang.launch_server"))
