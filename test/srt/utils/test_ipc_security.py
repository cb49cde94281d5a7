"""IPC endpoints live in a private directory, and nothing arriving on a socket is unpickled."""

from __future__ import annotations

import os
import pickle
import stat

import orjson
import pytest

from sglang.srt.utils.network import PortArgs
from sglang.srt.wire import msgcodec


def test_ipc_directory_is_private_and_holds_every_endpoint():
    args = PortArgs.create()
    try:
        mode = stat.S_IMODE(os.stat(args.ipc_dir).st_mode)
        assert mode == 0o700
        for endpoint in (args.scheduler_input, args.detokenizer_input, args.tokenizer_output(3)):
            assert endpoint.startswith(f"ipc://{args.ipc_dir}/")
    finally:
        args.cleanup()
    assert not os.path.exists(args.ipc_dir)


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch /tmp/sglang-pickle-was-executed",))


@pytest.mark.parametrize(
    "frames",
    [
        [pickle.dumps(_Boom())],
        [orjson.dumps({"__t__": "_Boom"})],
        [orjson.dumps({"__t__": "AbortReq", "rids": {"__t__": "posix.system"}})],
    ],
)
def test_only_registered_messages_decode(frames):
    with pytest.raises(Exception):
        msgcodec.decode(frames)
    assert not os.path.exists("/tmp/sglang-pickle-was-executed")
