"""Ports, IPC endpoints and ZeroMQ sockets."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from dataclasses import dataclass

import zmq


def get_free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free now (tests start servers on it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class PortArgs:
    """The IPC endpoints of one engine, all inside a private 0700 directory."""

    ipc_dir: str
    scheduler_input: str  # tokenizer manager(s) -> scheduler (replica 0 of --dp-size; see scheduler_input_of)
    detokenizer_input: str  # scheduler -> detokenizer
    tokenizer_output_prefix: str  # detokenizer -> tokenizer manager N: f"{prefix}{N}"

    @staticmethod
    def create() -> "PortArgs":
        # mkdtemp creates the directory with mode 0700: no other user can connect to the sockets.
        ipc_dir = tempfile.mkdtemp(prefix="sglang-embed-")
        os.chmod(ipc_dir, 0o700)
        return PortArgs(
            ipc_dir=ipc_dir,
            scheduler_input=f"ipc://{ipc_dir}/scheduler",
            detokenizer_input=f"ipc://{ipc_dir}/detokenizer",
            tokenizer_output_prefix=f"ipc://{ipc_dir}/tokenizer-",
        )

    def scheduler_input_of(self, dp_rank: int) -> str:
        """Where scheduler replica `dp_rank` listens (replica 0: `scheduler_input`)."""
        return self.scheduler_input if dp_rank == 0 else f"{self.scheduler_input}-{dp_rank}"

    def tokenizer_output(self, worker_id: int) -> str:
        return f"{self.tokenizer_output_prefix}{worker_id}"

    def cleanup(self) -> None:
        shutil.rmtree(self.ipc_dir, ignore_errors=True)


def make_socket(ctx: zmq.Context, kind: int, endpoint: str, bind: bool) -> zmq.Socket:
    """A PUSH/PULL socket with unbounded buffers: back-pressure is the scheduler's job, not ZMQ's."""
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    if bind:
        sock.bind(endpoint)
    else:
        sock.connect(endpoint)
    return sock
