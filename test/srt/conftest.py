"""Fixtures shared by the manager tests."""

from __future__ import annotations

import pytest
import zmq

from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.hf_tokenizer import load_tokenizer
from sglang.srt.utils.network import PortArgs, make_socket


@pytest.fixture(scope="session")
def hf_tokenizer():
    """The bundled model's tokenizer (modules that need another one override this fixture)."""
    return load_tokenizer(ServerArgs().tokenizer_path, False)


@pytest.fixture
def harness():
    """A TokenizerManager's sockets with the test as scheduler: (port args, ZeroMQ context, the
    bound scheduler-input PULL socket); destroyed and cleaned up afterwards."""
    port_args = PortArgs.create()
    ctx = zmq.Context()
    sched = make_socket(ctx, zmq.PULL, port_args.scheduler_input, bind=True)
    yield port_args, ctx, sched
    ctx.destroy(linger=0)
    port_args.cleanup()
