"""The package's import layers and process rules (docs/architecture.md): every import points
down, no process's folder imports another process's code, and no import circle.

Reads every module under python/sglang with `ast` (nothing is imported), resolves each
`import` / `from ... import` to the package module it names, including imports inside functions,
and checks them against LAYERS and PROCESS_RULES. Imports under `if TYPE_CHECKING:` are for type
hints only and may point anywhere, but they count for circles: two modules whose hints name each
other are one design split in two files. A module outside every layer fails too: a new folder
needs a place in the order.
"""

from __future__ import annotations

import ast
import os
from typing import Optional

import pytest

PACKAGE_DIR = os.path.join(os.path.dirname(__file__), "..", "python", "sglang")

# Top to bottom; a module may import from its own layer and every layer below it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("launchers", ("sglang", "sglang.cli", "sglang.launch_server", "sglang.integrations")),
    ("entrypoints", ("sglang.srt.entrypoints",)),
    ("frontend", ("sglang.srt.frontend",)),
    ("renderer", ("sglang.srt.renderer",)),
    ("scheduler", ("sglang.srt.scheduler",)),
    ("model_executor", ("sglang.srt.model_executor",)),
    ("models", ("sglang.srt.models",)),
    ("layers", ("sglang.srt.layers",)),
    ("model_loader", ("sglang.srt.model_loader",)),
    ("wire", ("sglang.srt.wire",)),
    ("configs", ("sglang.srt.configs",)),
    ("server_args", ("sglang.srt.server_args",)),
    ("ground", ("sglang.srt", "sglang.srt.errors", "sglang.srt.utils", "sglang.srt.metrics")),
]


# Which process runs a folder, and the folders of other processes it must not import (at run time):
# the HTTP process (frontend/) and the detokenizer (renderer/) never load the model's code, so they
# stay free of torch; wire/ (messages, codec) and everything below the model code are shared.
SCHEDULER_SIDE = ("scheduler", "model_executor", "models", "layers", "model_loader")
PROCESS_RULES: dict[str, tuple[str, ...]] = {
    "frontend": ("renderer", *SCHEDULER_SIDE),
    "renderer": ("frontend", *SCHEDULER_SIDE),
    "scheduler": ("frontend", "renderer"),
}


def layer_of(module: str) -> Optional[int]:
    """Index into LAYERS of the longest prefix owning `module` (None: no layer owns it)."""
    best, best_len = None, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            owns = module == prefix or (module.startswith(prefix + ".") and prefix not in ("sglang", "sglang.srt"))
            if owns and len(prefix) > best_len:
                best, best_len = i, len(prefix)
    return best


def package_modules() -> dict[str, str]:
    """Dotted module name -> file path, for every .py file of the package."""
    root = os.path.abspath(os.path.join(PACKAGE_DIR, ".."))
    out = {}
    for dirpath, _, files in os.walk(os.path.abspath(PACKAGE_DIR)):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                parts = os.path.relpath(path, root)[: -len(".py")].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                out[".".join(parts)] = path
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                ids.update(id(n) for n in ast.walk(stmt))
    return ids


def runtime_imports(module: str, path: str, known: set[str]) -> set[str]:
    """The package modules `module` imports at run time (anywhere but under `if TYPE_CHECKING:`)."""
    return imports_of(module, path, known, type_hints=False)


def imports_of(module: str, path: str, known: set[str], type_hints: bool = True) -> set[str]:
    """The package modules `module` imports: at module level, inside functions and, with
    `type_hints`, under `if TYPE_CHECKING:`."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    skip = set() if type_hints else _type_checking_nodes(tree)
    is_package = path.endswith("__init__.py")
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".") if is_package else module.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            # `from pkg import mod` names a module; `from mod import name` names the module itself.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import sglang.srt.x.y` -> the deepest known module
                target = target.rpartition(".")[0]
            if target and target.startswith("sglang") and target != module:
                found.add(target)
    return found


def import_graph(type_hints: bool = False) -> dict[str, set[str]]:
    modules = package_modules()
    known = set(modules)
    return {m: imports_of(m, p, known, type_hints) for m, p in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> Optional[list[str]]:
    """One import circle, as a list of modules, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> Optional[list[str]]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


GRAPH = import_graph()  # run-time imports
FULL_GRAPH = import_graph(type_hints=True)  # ... and type hints


def process_violations(graph: dict[str, set[str]]) -> list[str]:
    """`module (its folder) imports target (a folder PROCESS_RULES keeps from it)`, for each such import."""
    found = []
    for module, targets in sorted(graph.items()):
        own = LAYERS[layer_of(module)][0]
        for target in sorted(targets):
            if LAYERS[layer_of(target)][0] in PROCESS_RULES.get(own, ()):
                found.append(f"{module} ({own}) imports {target} ({LAYERS[layer_of(target)][0]})")
    return found


def test_every_module_has_a_layer():
    homeless = sorted(m for m in GRAPH if layer_of(m) is None)
    assert not homeless, f"modules outside every layer (add them to LAYERS and docs/architecture.md): {homeless}"


def test_imports_point_down():
    upward = []
    for module, targets in sorted(GRAPH.items()):
        for target in sorted(targets):
            if layer_of(target) < layer_of(module):
                upward.append(
                    f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
                )
    assert not upward, "imports from a lower layer up to a higher one:\n" + "\n".join(upward)


def test_no_process_imports_another_process_code():
    bad = process_violations(GRAPH)
    assert not bad, "a process's folder imports another process's code (docs/architecture.md):\n" + "\n".join(bad)


def test_no_import_circles():
    """Counting imports inside functions and under TYPE_CHECKING: zero circles of any kind."""
    cycle = find_cycle(FULL_GRAPH)
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


@pytest.mark.parametrize(
    "module, source, caught",
    [
        ("sglang.srt.frontend.bad", "from sglang.srt.layers import pooler\n", True),  # HTTP process -> model code
        ("sglang.srt.frontend.bad", "def f():\n    import sglang.srt.renderer.sparse_render\n", True),
        ("sglang.srt.renderer.bad", "from sglang.srt.model_executor.forward_io import ForwardInput\n", True),
        ("sglang.srt.scheduler.bad", "from sglang.srt.renderer import detokenizer_manager\n", True),
        ("sglang.srt.frontend.bad", "from sglang.srt.wire.io_struct import AbortReq\n", False),  # shared by all
        (
            "sglang.srt.frontend.bad",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import sglang.srt.layers\n",
            False,
        ),
    ],
)
def test_the_process_rule_catches_a_bad_import(tmp_path, module, source, caught):
    path = tmp_path / "bad.py"
    path.write_text(source)
    graph = {module: runtime_imports(module, str(path), set(GRAPH) | {module})}
    assert bool(process_violations(graph)) is caught


@pytest.mark.parametrize(
    "source, message",
    [
        ("from sglang.srt.entrypoints.engine import Engine\n", "imports sglang.srt.entrypoints.engine"),
        ("def f():\n    from sglang.srt.scheduler import scheduler\n", "imports sglang.srt.scheduler.scheduler"),
    ],
)
def test_the_check_catches_a_back_pointing_import(tmp_path, source, message):
    path = tmp_path / "bad.py"
    path.write_text(source)
    module = "sglang.srt.configs.bad"
    graph = {**GRAPH, module: runtime_imports(module, str(path), set(GRAPH) | {module})}
    bad = [t for t in graph[module] if layer_of(t) < layer_of(module)]
    assert bad and message.split()[-1] in bad


def test_type_checking_imports_may_point_anywhere(tmp_path):
    path = tmp_path / "hints.py"
    path.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from sglang.srt.model_executor.forward_batch import ForwardBatch\n"
    )
    assert runtime_imports("sglang.srt.layers.hints", str(path), set(GRAPH)) == set()


def test_a_circle_is_found():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_type_hints_count_for_circles(tmp_path):
    hints = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sglang.srt.b import B\n"
    (tmp_path / "a.py").write_text(hints)
    (tmp_path / "b.py").write_text("def f():\n    from sglang.srt.a import A\n")
    known = {"sglang.srt.a", "sglang.srt.b"}
    graph = {m: imports_of(m, str(tmp_path / f"{m[-1]}.py"), known) for m in known}
    assert find_cycle(graph) == ["sglang.srt.a", "sglang.srt.b", "sglang.srt.a"]
    assert find_cycle({m: runtime_imports(m, str(tmp_path / f"{m[-1]}.py"), known) for m in known}) is None
