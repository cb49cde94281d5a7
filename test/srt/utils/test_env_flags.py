"""Every `sglang serve` flag from its SGLANG_* variable (utils/env_flags.py): each kind of flag, the
precedence (flag > variable > default), errors that name the variable, and --help.

`test_every_serve_flag_reads_its_variable` walks the real parser, so a flag added later is covered
without touching this file."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from sglang.cli import build_serve_parser, parse_serve_args
from sglang.srt.errors import ConfigError
from sglang.srt.utils.env_flags import EnvHelpFormatter, env_actions, env_var, flag_kind, parse_with_env, read_env

PACKAGE = Path(__file__).resolve().parents[3] / "python" / "sglang"
# Variables the package reads that are not flags (they must never shadow one).
NOT_FLAGS = {"SGLANG_KERNEL_CACHE", "SGLANG_KERNEL_ISA", "SGLANG_KERNEL_PREBUILT"}
# Values tried, in order, until the command line accepts one for the flag.
CANDIDATES = ("3", "0.25", "text-value", '{"k": [1, 2]}', "1,2")


def _cli_value(parser: argparse.ArgumentParser, action: argparse.Action) -> tuple[str, list[str]]:
    """(variable text, equivalent command line) for a non-default value of `action`."""
    flag = action.option_strings[0]
    kind = flag_kind(action)
    if kind == "bool":
        return "yes", [flag]
    if kind == "count":
        return "2", [flag, flag]
    if action.choices is not None:
        choice = [c for c in action.choices if c != action.default][-1]
        return str(choice), [flag, str(choice)]
    if kind == "json":
        return CANDIDATES[3], [flag, CANDIDATES[3]]
    for text in CANDIDATES:
        try:
            parser.parse_args([flag, text])
        except SystemExit:
            continue
        if kind == "list":
            return f"{text},{text}", ([flag, text, flag, text] if action.nargs is None else [flag, text, text])
        return text, [flag, text]
    raise AssertionError(f"no candidate value fits {flag}: add one to CANDIDATES")


def _serve_actions():
    parser = build_serve_parser()
    return [(a, var) for a, var in env_actions(parser)]


def test_every_serve_flag_reads_its_variable_and_the_flag_wins():
    parser = build_serve_parser()
    actions = list(env_actions(parser))
    assert len(actions) >= 40  # every flag of `sglang serve`, not a hand-picked few
    help_text = " ".join(parser.format_help().split())  # argparse wraps lines
    for action, var in actions:
        long = [o for o in action.option_strings if o.startswith("--")][0]
        assert var == "SGLANG_" + long[2:].replace("-", "_").upper()
        assert f"[env: {var}]" in help_text, var
        text, argv = _cli_value(parser, action)
        from_env, used = parse_with_env(build_serve_parser(), [], {var: text})
        from_cli = build_serve_parser().parse_args(argv)
        assert vars(from_env) == vars(from_cli), var
        assert used == {action.dest: var}
        # The command line wins over the variable (an on/off flag given beats a variable saying off).
        if flag_kind(action) != "count":  # counts add up: the variable's, then each -v
            env_text = "no" if flag_kind(action) == "bool" else text
            both, used = parse_with_env(build_serve_parser(), argv, {var: env_text})
            assert vars(both) == vars(from_cli) and used == {}, var
        # An empty variable counts as unset.
        assert vars(parse_with_env(build_serve_parser(), [], {var: ""})[0]) == vars(parser.parse_args([]))


def test_every_checked_flag_names_its_variable_on_a_bad_value():
    checked = 0
    for action, var in env_actions(build_serve_parser()):
        kind = flag_kind(action)
        typed = action.type in (int, float) or action.choices is not None or kind in ("bool", "json", "count")
        if not typed:
            continue  # free text: any value is a value
        with pytest.raises(ConfigError) as e:
            read_env(build_serve_parser(), {var: "@@not-valid@@"})
        assert var in str(e.value) and action.option_strings[0] in str(e.value), str(e.value)
        checked += 1
    assert checked >= 25


@pytest.mark.parametrize(
    "var, text, field, want",
    [
        ("SGLANG_MAX_BATCH_SIZE", "7", "max_batch_size", 7),  # int (with alias spellings)
        ("SGLANG_MAX_QUEUE_DELAY", "0.004", "max_queue_delay", 0.004),  # float
        ("SGLANG_ALLOW_AUTO_TRUNCATE", "TRUE", "allow_auto_truncate", True),  # bool
        ("SGLANG_LOG_REQUESTS", "off", "log_requests", False),
        ("SGLANG_LOG_FORMAT", "json", "log_format", "json"),  # choice
        ("SGLANG_CORS_ALLOW_ORIGIN", "https://a.example, https://b.example", "cors_allow_origin", None),  # list
        ("SGLANG_JSON_MODEL_OVERRIDE_ARGS", '{"matryoshka_dimensions": [64]}', "model_override_args", None),  # JSON
    ],
)
def test_each_flag_kind_reaches_server_args(var, text, field, want):
    args = parse_serve_args([], {var: text})
    got = getattr(args, field)
    if var == "SGLANG_CORS_ALLOW_ORIGIN":
        assert got == ["https://a.example", "https://b.example"]
    elif var == "SGLANG_JSON_MODEL_OVERRIDE_ARGS":
        assert got == {"matryoshka_dimensions": [64]}
    else:
        assert got == want


def test_the_command_line_wins_and_lists_take_a_json_array():
    env = {"SGLANG_MAX_BATCH_SIZE": "7", "SGLANG_LOG_FORMAT": "json", "SGLANG_MAX_QUEUE_DELAY": "0.5"}
    args = parse_serve_args(["--max_batch_size", "9", "--log-format", "text"], env)
    assert (args.max_batch_size, args.log_format, args.max_queue_delay) == (9, "text", 0.5)
    env = {"SGLANG_CORS_ALLOW_ORIGIN": '["https://a.example", "https://b.example"]'}
    assert parse_serve_args([], env).cors_allow_origin == ["https://a.example", "https://b.example"]
    args = parse_serve_args(["--cors-allow-origin", "https://c.example"], env)
    assert args.cors_allow_origin == ["https://c.example"]


def test_bad_values_name_the_variable():
    cases = {
        "SGLANG_PORT": ("eighty", "not a valid int"),
        "SGLANG_MAX_QUEUE_DELAY": ("soon", "not a valid float"),
        "SGLANG_LOG_REQUESTS": ("maybe", "1/0, true/false, yes/no"),
        "SGLANG_DTYPE": ("float128", "must be one of"),
        "SGLANG_JSON_MODEL_OVERRIDE_ARGS": ("{oops", "not valid JSON"),
        "SGLANG_CORS_ALLOW_ORIGIN": ('["unclosed"', "not a valid JSON array"),
    }
    for var, (text, why) in cases.items():
        with pytest.raises(ConfigError) as e:
            parse_serve_args([], {var: text})
        assert str(e.value).startswith(f"{var}=") and why in str(e.value), str(e.value)
    # Values that parse but fail validation say which variable set them; a flag's error does not.
    with pytest.raises(ConfigError, match=r"--port must be between .*\(set by SGLANG_PORT\)"):
        parse_serve_args([], {"SGLANG_PORT": "0"})
    with pytest.raises(ConfigError) as e:
        parse_serve_args(["--port", "0"], {})
    assert "SGLANG_PORT" not in str(e.value)


def test_api_key_from_the_environment_and_never_echoed(monkeypatch):
    monkeypatch.delenv("SGLANG_API_KEY", raising=False)
    assert parse_serve_args([], {"SGLANG_API_KEY": "sk-env"}).api_key == "sk-env"
    assert parse_serve_args(["--api-key", "sk-flag"], {"SGLANG_API_KEY": "sk-env"}).api_key == "sk-flag"
    monkeypatch.setenv("SGLANG_API_KEY", "sk-process")  # os.environ, as `sglang serve` reads it
    assert parse_serve_args([]).api_key == "sk-process"
    with pytest.raises(ConfigError) as e:
        parse_serve_args([], {"SGLANG_API_KEY": " padded secret "})
    assert "SGLANG_API_KEY" in str(e.value) and "padded secret" not in str(e.value)


def test_help_lists_variables_and_which_are_set_without_values():
    parser = build_serve_parser()
    read_env(parser, {"SGLANG_API_KEY": "sk-hidden-value", "SGLANG_PORT": "31000"})
    text = " ".join(parser.format_help().split())
    assert "(now from $SGLANG_API_KEY) [env: SGLANG_API_KEY]" in text
    assert "(now from $SGLANG_PORT)" in text and "[env: SGLANG_MAX_QUEUE_DELAY]" in text
    assert "sk-hidden-value" not in text
    # --help still works when a variable holds a bad value.
    args, _ = parse_with_env(build_serve_parser(), [], {"SGLANG_PORT": "eighty"}, strict=False)
    assert args.port == 30000


def test_other_flag_shapes():
    """Shapes `sglang serve` does not use yet, for flags added later: nargs, counts, --no-x, store_false."""
    p = argparse.ArgumentParser(formatter_class=EnvHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+")
    p.add_argument("--pair", nargs=2)
    p.add_argument("--verbose", "-v", action="count", default=0)
    p.add_argument("--color", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--no-cache", dest="cache", action="store_false")
    p.add_argument("--model-json", type=json.loads)
    env = {
        "SGLANG_SIZES": "1,2,3",
        "SGLANG_PAIR": '["a,b", "c"]',
        "SGLANG_VERBOSE": "2",
        "SGLANG_COLOR": "no",
        "SGLANG_NO_CACHE": "1",
        "SGLANG_MODEL_JSON": '{"a": 1}',
    }
    args, used = parse_with_env(p, [], env)
    assert args.sizes == [1, 2, 3] and args.pair == ["a,b", "c"] and args.verbose == 2
    assert args.color is False and args.cache is False and args.model_json == {"a": 1}
    assert set(used.values()) == set(env)
    with pytest.raises(ConfigError, match="SGLANG_PAIR.*needs 2 values"):
        read_env(p, {"SGLANG_PAIR": "a"})
    with pytest.raises(ConfigError, match="SGLANG_SIZES.*not a valid int"):
        read_env(p, {"SGLANG_SIZES": "1,x"})
    assert env_var(p._actions[0]) is None  # --help has no variable


def test_no_other_sglang_variable_shadows_a_flag():
    """A variable the package reads for something else must not collide with a flag's variable."""
    flag_vars = {var for _, var in _serve_actions()}
    read = set()
    for path in PACKAGE.rglob("*.py"):
        read |= set(re.findall(r"[\"'](SGLANG_[A-Z0-9_]+)[\"']", path.read_text()))
    others = read - flag_vars
    assert others <= NOT_FLAGS, others - NOT_FLAGS
