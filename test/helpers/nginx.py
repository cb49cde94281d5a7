"""A real nginx for tests: docker/nginx/sglang-embed.conf.template rendered for loopback ports, run
as a non-daemon child with its own prefix (pid, logs, temp files) in a temporary directory."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import requests

from sglang.srt.utils.network import get_free_port
from test.helpers.server import die_with_parent
from test.helpers.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "docker" / "nginx" / "sglang-embed.conf.template"
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def render_template(text: str, env: dict[str, str], upstreams: list[str]) -> str:
    """What the nginx image's envsubst step does with `env`, plus one `server` line per upstream.

    Like the image, only ${NAME} forms whose NAME is in `env` are replaced; nginx's own `$host`
    and friends stay. The single `server ${SGLANG_UPSTREAM} ...;` line becomes one line per
    address, as the template's header tells users with a fixed list of hosts to do.
    """
    lines = []
    for line in text.splitlines():
        if line.strip().startswith("server ${SGLANG_UPSTREAM}"):
            lines += [line.replace("${SGLANG_UPSTREAM}", u) for u in upstreams]
        else:
            lines.append(line)
    return _VAR.sub(lambda m: env.get(m.group(1), m.group(0)), "\n".join(lines) + "\n")


def unfilled_variables(conf: str) -> set[str]:
    """${NAME} forms left outside comments: a variable the template needs but was not given."""
    return {m for line in conf.splitlines() for m in _VAR.findall(line.split("#", 1)[0])}


def nginx_binary() -> str:
    """nginx from PATH or /usr/sbin; `make test` installs Debian's nginx-light when it is missing."""
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
    if found is None:
        raise RuntimeError("nginx is missing: `make test` installs it as root, or: apt-get install -y nginx-light")
    return found


class NginxProcess:
    """nginx in front of `upstreams` (host:port), listening on a free loopback port."""

    def __init__(
        self,
        upstreams: list[str],
        read_timeout: str = "120s",
        max_payload_bytes: int = 8 * 1024 * 1024,
        timeout: float = 10.0,
    ) -> None:
        self.port = get_free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.prefix = Path(tempfile.mkdtemp(prefix="sglang-nginx-"))
        env = {
            "NGINX_PORT": f"127.0.0.1:{self.port}",
            "SGLANG_PROXY_READ_TIMEOUT": read_timeout,
            "SGLANG_MAX_PAYLOAD_BYTES": str(max_payload_bytes),
        }
        site = render_template(TEMPLATE.read_text(), env, upstreams)
        if unfilled_variables(site):
            raise KeyError(f"template variables without a value: {sorted(unfilled_variables(site))}")
        (self.prefix / "sglang-embed.conf").write_text(site)
        (self.prefix / "nginx.conf").write_text(self._main_conf())
        self.log_path = self.prefix / "stdout.log"
        self._log = open(self.log_path, "w")
        cmd = [
            nginx_binary(),
            "-p",
            str(self.prefix),
            "-e",
            str(self.prefix / "error.log"),
            "-c",
            str(self.prefix / "nginx.conf"),
            "-g",
            "daemon off;",
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent
        )
        self._wait_listening(timeout)

    def _main_conf(self) -> str:
        p = self.prefix
        # As root the workers would switch to `nobody`, who cannot write this 0700 temp directory.
        user = "user root;\n" if os.geteuid() == 0 else ""
        temps = "".join(
            f"    {kind}_temp_path {p}/{kind}_temp;\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        return (
            f"{user}worker_processes 1;\npid {p}/nginx.pid;\nerror_log {p}/error.log warn;\n"
            f"events {{ worker_connections 1024; }}\n"
            f"http {{\n{temps}    include {p}/sglang-embed.conf;\n}}\n"
        )

    def _wait_listening(self, timeout: float) -> None:
        if not wait_until(self._listening, timeout, interval=0.05):
            self.stop()
            raise TimeoutError(f"nginx not listening within {timeout} s:\n{self.errors()}")

    def _listening(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"nginx exited with {self.proc.returncode}:\n{self.errors()}")
        try:
            requests.get(self.base_url + "/__nginx_up__", timeout=1)
            return True
        except requests.ConnectionError:
            return False

    def access_log(self) -> list[str]:
        self._log.flush()
        return self.log_path.read_text().splitlines()

    def errors(self) -> str:
        path = self.prefix / "error.log"
        return path.read_text()[-4000:] if path.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful: finish open requests, then exit
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._log.close()
        shutil.rmtree(self.prefix, ignore_errors=True)

    def __enter__(self) -> "NginxProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
