"""A strict parser for the Prometheus text format (0.0.4), to check what GET /metrics serves."""

from __future__ import annotations

import math
import re
from collections import defaultdict

_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r'(?:\{(?P<labels>(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*)\})?'
    r" (?P<value>[-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|Inf|NaN))$"
)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
_TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def parse(text: str) -> dict:
    """-> {family: {"type", "help", "samples": [(name, labels dict, value)]}}; AssertionError if malformed."""
    assert text.endswith("\n"), "exposition must end with a newline"
    families: dict = {}
    current = None
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            families.setdefault(name, {"type": None, "help": None, "samples": []})["help"] = line.split(" ", 3)[3]
            current = name
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in _TYPES, f"line {n}: unknown type {kind}"
            fam = families.setdefault(name, {"type": None, "help": None, "samples": []})
            assert fam["type"] is None and not fam["samples"], f"line {n}: TYPE after samples or twice"
            fam["type"] = kind
            current = name
            continue
        assert not line.startswith("#") and line.strip(), f"line {n}: unexpected {line!r}"
        m = _SAMPLE.match(line)
        assert m, f"line {n}: not a sample: {line!r}"
        name = m["name"]
        assert current is not None and (
            name == current or name in (current + "_bucket", current + "_sum", current + "_count")
        ), f"line {n}: sample {name} outside its family {current}"
        labels = {
            k: v.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
            for k, v in _LABEL.findall(m["labels"] or "")
        }
        value = float(m["value"].replace("Inf", "inf"))
        families[current]["samples"].append((name, labels, value))
    for name, fam in families.items():
        if fam["type"] == "histogram":
            _check_histogram(name, fam["samples"])
        if fam["type"] == "counter":
            assert all(v >= 0 for _, _, v in fam["samples"]), f"{name}: negative counter"
    return families


def _check_histogram(name: str, samples: list) -> None:
    series: dict = defaultdict(lambda: {"buckets": [], "sum": None, "count": None})
    for sample, labels, value in samples:
        key = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        if sample.endswith("_bucket"):
            series[key]["buckets"].append((float(labels["le"].replace("Inf", "inf")), value))
        elif sample.endswith("_sum"):
            series[key]["sum"] = value
        else:
            series[key]["count"] = value
    for key, s in series.items():
        bounds = [b for b, _ in s["buckets"]]
        counts = [c for _, c in s["buckets"]]
        assert bounds == sorted(bounds) and bounds[-1] == math.inf, f"{name}{key}: buckets out of order or no +Inf"
        assert counts == sorted(counts), f"{name}{key}: buckets not cumulative"
        assert s["count"] == counts[-1], f"{name}{key}: _count != +Inf bucket"
        assert s["sum"] is not None


def value(families: dict, name: str, **labels) -> float:
    """The value of one sample (0.0 when the labelled series does not exist yet)."""
    for family in families.values():
        for sample, lab, v in family["samples"]:
            if sample == name and all(lab.get(k) == str(x) for k, x in labels.items()):
                return v
    return 0.0
