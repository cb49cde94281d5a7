"""The server process and the HTTP / detokenizer processes of a text model import no torch (#29).

Each check runs in a fresh interpreter, since this test process has torch already. The server
process is an HTTP process too; it asks a child to read the model config (model_check.py), and
loads the tokenizer class that child named, which imports no torch where AutoTokenizer would.
The import check is the fast one (`make test-fast`); the others start interpreters that load torch.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

import sglang.srt.frontend
from sglang.srt.entrypoints.model_check import check_model_in_child
from sglang.srt.errors import ConfigError
from sglang.srt.server_args import ServerArgs, default_model_path
from sglang.srt.utils.hf_tokenizer import load_tokenizer, tokenizer_class_of
from test.helpers.tiny_models import build_tiny_qwen3

# What the server process imports (the launch sequence, the HTTP app) and the detokenizer's process.
PROCESS_MODULES = [
    "sglang.launch_server",
    "sglang.cli",
    "sglang.srt.entrypoints.launch",
    "sglang.srt.entrypoints.http_worker",
    "sglang.srt.entrypoints.engine_processes",
    "sglang.srt.entrypoints.server_processes",
    "sglang.srt.configs.served_models",
    "sglang.srt.entrypoints.model_check",
    "sglang.srt.frontend.http.http_server",
    "sglang.srt.renderer.detokenizer_manager",
]
TORCH_PROBE = "import sys; print(sorted(m for m in ('torch', 'transformers.configuration_utils') if m in sys.modules))"


def run_fresh(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def frontend_modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(sglang.srt.frontend.__path__, "sglang.srt.frontend.")]


def test_the_http_process_modules_import_no_torch():
    modules = PROCESS_MODULES + frontend_modules()
    assert len(modules) > 40  # the walk found the frontend package
    assert run_fresh("\n".join(f"import {m}" for m in modules) + "\n" + TORCH_PROBE) == "[]"


@pytest.mark.slow
def test_the_probe_sees_torch_when_it_is_imported():
    assert run_fresh("import sglang.srt.model_executor.placement\n" + TORCH_PROBE) == "['torch']"


@pytest.mark.slow
def test_the_named_tokenizer_class_loads_without_torch():
    path = default_model_path()
    name = tokenizer_class_of(load_tokenizer(path, False))
    assert name == "transformers.models.bert.tokenization_bert:BertTokenizer"
    code = (
        "from sglang.srt.utils.hf_tokenizer import load_tokenizer\n"
        f"tok = load_tokenizer({path!r}, False, {name!r})\n"
        "assert tok('a b')['input_ids'][0] == tok.cls_token_id\n" + TORCH_PROBE
    )
    assert run_fresh(code) == "[]"


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory) -> str:
    return build_tiny_qwen3(str(tmp_path_factory.mktemp("qwen3")))


@pytest.mark.slow
def test_the_named_class_tokenizes_as_autotokenizer_does(tiny_qwen3):
    texts = ["hello world", "The quick brown fox, twice: the quick brown fox.", ""]
    for path in (default_model_path(), tiny_qwen3):
        auto = load_tokenizer(path, False)
        direct = load_tokenizer(path, False, tokenizer_class_of(auto))
        assert type(direct) is type(auto)
        assert direct(texts)["input_ids"] == auto(texts)["input_ids"]
        assert direct([("query", "a document")])["input_ids"] == auto([("query", "a document")])["input_ids"]
        assert direct.all_special_ids == auto.all_special_ids


def test_remote_code_classes_are_left_to_autotokenizer():
    class Custom:
        pass

    Custom.__module__ = "transformers_modules.some_repo.tokenization_custom"
    assert tokenizer_class_of(Custom()) is None


@pytest.mark.slow
def test_the_model_check_runs_in_a_child_and_names_the_tokenizer():
    args = ServerArgs()
    check_model_in_child(args)
    assert args.tokenizer_class == "transformers.models.bert.tokenization_bert:BertTokenizer"


@pytest.mark.slow
def test_the_model_check_child_reports_a_config_error(tmp_path):
    (tmp_path / "config.json").write_text('{"architectures": ["NoSuchModelForAnything"], "model_type": "bert"}')
    with pytest.raises(ConfigError, match="NoSuchModelForAnything"):
        check_model_in_child(ServerArgs(model_path=str(tmp_path)))
