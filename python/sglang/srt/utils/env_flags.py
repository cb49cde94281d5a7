"""Every command-line flag from the environment: `--foo-bar` may come from `SGLANG_FOO_BAR`.

Works from the argparse definitions alone, so a flag added anywhere gets its variable for free:
a flag given on the command line wins over its variable, which wins over the built-in default.

How a value is read depends on the flag's kind:
    on/off flags (store_true)   1/0, true/false, yes/no, on/off (any case)
    repeatable / multi-value    comma-separated (`a,b`), or a JSON array (`["a,1", "b"]`)
    JSON flags                  the JSON text, checked here
    everything else             as on the command line (int, float, choice, text)
An empty variable counts as unset (compose files often pass `${VAR:-}`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
from typing import Any, Iterable, Mapping, Optional, Sequence

from sglang.srt.errors import ConfigError

ENV_PREFIX = "SGLANG_"
LIST_SEPARATOR = ","
TRUE_WORDS = frozenset({"1", "true", "yes", "on", "y", "t"})
FALSE_WORDS = frozenset({"0", "false", "no", "off", "n", "f"})
_SOURCE_ATTR = "sglang_env_source"  # set on an action whose default came from its variable


def env_var(action: argparse.Action) -> Optional[str]:
    """`--foo-bar` -> `SGLANG_FOO_BAR` (from the flag's first long spelling); None for --help."""
    if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
        return None
    for opt in action.option_strings:
        if opt.startswith("--"):
            return ENV_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", opt[2:]).upper()
    return None


def flag_kind(action: argparse.Action) -> str:
    """bool, list, json, count or value: how an environment value for this flag is read."""
    if isinstance(action, argparse.BooleanOptionalAction):
        return "bool"
    if isinstance(action, (argparse._StoreConstAction, argparse._AppendConstAction)):
        return "bool"  # store_true / store_false / store_const
    if isinstance(action, argparse._CountAction):
        return "count"
    if isinstance(action, argparse._AppendAction) or action.nargs in ("+", "*") or isinstance(action.nargs, int):
        return "list"
    if is_json_flag(action):
        return "json"
    return "value"


def is_json_flag(action: argparse.Action) -> bool:
    """Flags that take JSON text: named `--json-...` / `...-json`, or with metavar JSON."""
    name = (action.dest or "").lower()
    return name.startswith("json_") or name.endswith("_json") or action.metavar == "JSON" or action.type is json.loads


def parse_bool(text: str) -> Optional[bool]:
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    return None


def split_list(text: str) -> list[str]:
    """`a,b` -> ["a", "b"]; a JSON array keeps commas inside its items."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            items = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise ValueError(f"not a valid JSON array ({e.msg})") from None
        if not isinstance(items, list):
            raise ValueError("not a JSON array")
        return [item if isinstance(item, str) else json.dumps(item) for item in items]
    return [item.strip() for item in stripped.split(LIST_SEPARATOR) if item.strip()]


def _convert_one(action: argparse.Action, text: str) -> Any:
    value = text
    if action.type is not None and callable(action.type):
        try:
            value = action.type(text)
        except (TypeError, ValueError, argparse.ArgumentTypeError) as e:
            kind = getattr(action.type, "__name__", "value")
            raise ValueError(f"not a valid {kind}" + (f" ({e})" if isinstance(e, argparse.ArgumentTypeError) else ""))
    if action.choices is not None and value not in action.choices:
        raise ValueError("must be one of " + ", ".join(map(str, action.choices)))
    return value


def convert(action: argparse.Action, text: str) -> Any:
    """The flag's value for the environment text `text` (raises ValueError saying what is wrong)."""
    kind = flag_kind(action)
    if kind == "bool":
        flag = parse_bool(text)
        if flag is None:
            raise ValueError("must be one of 1/0, true/false, yes/no, on/off")
        if isinstance(action, argparse.BooleanOptionalAction):
            return flag
        return action.const if flag else action.default
    if kind == "count":
        try:
            return int(text)
        except ValueError:
            raise ValueError("not a valid int") from None
    if kind == "list":
        items = [_convert_one(action, item) for item in split_list(text)]
        if isinstance(action.nargs, int) and len(items) != action.nargs:
            raise ValueError(f"needs {action.nargs} values, got {len(items)}")
        if action.nargs == "+" and not items:
            raise ValueError("needs at least one value")
        return items
    if kind == "json":
        try:
            json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"not valid JSON ({e.msg} at character {e.pos})") from None
    return _convert_one(action, text)


def env_actions(parser: argparse.ArgumentParser) -> Iterable[tuple[argparse.Action, str]]:
    """(action, variable name) for every flag of the parser."""
    for action in parser._actions:
        var = env_var(action)
        if var is not None:
            yield action, var


class _EnvList(list):
    """A list value that came from the environment: argparse's append copies it (keeping this type)
    before adding command-line items, which parse_with_env then drops so the flags win."""


def read_env(
    parser: argparse.ArgumentParser, environ: Optional[Mapping[str, str]] = None, strict: bool = True
) -> dict[str, tuple[str, Any]]:
    """{dest: (variable, value)} for every flag whose `SGLANG_*` variable is set.

    A bad value raises ConfigError naming the variable (or is skipped when not `strict`, e.g. for
    --help). A required flag whose variable is set is no longer required.
    """
    environ = os.environ if environ is None else environ
    found: dict[str, tuple[str, Any]] = {}
    for action, var in env_actions(parser):
        text = environ.get(var)
        if text is None or text == "":
            continue
        try:
            value = convert(action, text)
        except ValueError as e:
            if not strict:
                continue
            shown = "<hidden>" if action.dest in _secret_dests(parser) else text
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise ConfigError(f"{var}={shown!r} (for {action.option_strings[0]}): {e}") from None
        if isinstance(value, list):
            value = _EnvList(value)
        action.required = False
        setattr(action, _SOURCE_ATTR, var)
        found[action.dest] = (var, value)
    return found


class _FromEnv:
    """Stands on the namespace for a variable's value: still there after parsing means the command
    line did not set the flag (identity, so a flag equal to its variable's value still counts as given)."""


def parse_with_env(
    parser: argparse.ArgumentParser,
    argv: Sequence[str],
    environ: Optional[Mapping[str, str]] = None,
    strict: bool = True,
) -> tuple[argparse.Namespace, dict[str, str]]:
    """Parse `argv` with the environment under it: command line > `SGLANG_*` variable > default.

    Returns the namespace and {dest: variable} of the values that came from the environment.
    """
    found = read_env(parser, environ, strict)
    counts = {a.dest for a in parser._actions if isinstance(a, argparse._CountAction)}
    # argparse leaves attributes already on the namespace alone unless the command line sets them.
    # Lists and counts are added to by the command line, so they go in as themselves.
    markers = {
        dest: value if isinstance(value, _EnvList) or dest in counts else _FromEnv()
        for dest, (_, value) in found.items()
    }
    args = parser.parse_args(list(argv), namespace=argparse.Namespace(**markers))
    used: dict[str, str] = {}
    for dest, (var, value) in found.items():
        got = getattr(args, dest)
        if got is markers[dest]:
            setattr(args, dest, list(value) if isinstance(value, _EnvList) else value)
            used[dest] = var
        elif isinstance(got, _EnvList):  # appended to: only the command line's items
            setattr(args, dest, list(got[len(value) :]))
    return args, used


SECRET_DESTS_ATTR = "sglang_secret_dests"


def mark_secrets(parser: argparse.ArgumentParser, dests: Iterable[str]) -> None:
    """Flags whose values are never echoed (in errors or --help): API keys, passwords."""
    setattr(parser, SECRET_DESTS_ATTR, frozenset(dests))


def _secret_dests(parser: argparse.ArgumentParser) -> frozenset:
    return getattr(parser, SECRET_DESTS_ATTR, frozenset())


def explain_error(message: str, parser: argparse.ArgumentParser, used: Mapping[str, str]) -> str:
    """Add "(set by SGLANG_X)" to a validation message about a flag whose value came from the
    environment, so a bad environment value names its variable."""
    notes = []
    for action in parser._actions:
        var = used.get(action.dest)
        if var is None:
            continue
        if any(re.search(re.escape(opt) + r"(?![\w-])", message) for opt in action.option_strings):
            notes.append(var)
    if not notes:
        return message
    return f"{message} (set by {', '.join(sorted(set(notes)))})"


class EnvHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """--help shows each flag's variable, and which flags the environment sets now (without their
    values: a key or password must not be printed)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        var = env_var(action)
        source = getattr(action, _SOURCE_ATTR, None)
        if source is not None:
            text = (action.help or "") + f" (now from ${source})"
        else:
            text = super()._get_help_string(action) or ""
        if var is not None:
            text += f" [env: {var}]"
        return text
