"""A minimal Prometheus text exposition (format 0.0.4): counters, gauges and fixed-bucket histograms.

Written here rather than depending on prometheus_client: the server needs a dozen metrics updated
from one event loop per process, which is a few dozen lines. Metrics are not locked; each process
updates and renders its own registry from a single thread (its asyncio loop).
"""

from __future__ import annotations

import bisect
import math
import re
from typing import Iterable, Optional, Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

LabelValues = tuple[str, ...]


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(v: float) -> str:
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if math.isnan(v):
        return "NaN"
    if float(v).is_integer() and abs(v) < 1e15:
        return f"{int(v)}.0"
    return repr(float(v))


def _labels(names: Sequence[str], values: Sequence[str], extra: Optional[tuple[str, str]] = None) -> str:
    pairs = [f'{n}="{_escape_label(v)}"' for n, v in zip(names, values)]
    if extra is not None:
        pairs.append(f'{extra[0]}="{extra[1]}"')
    return "{" + ",".join(pairs) + "}" if pairs else ""


class _Metric:
    kind = ""

    def __init__(self, name: str, help_text: str, labelnames: Sequence[str] = ()) -> None:
        if not _NAME_RE.match(name):
            raise ValueError(f"invalid metric name {name!r}")
        for label in labelnames:
            if not _LABEL_RE.match(label) or label == "le":
                raise ValueError(f"invalid label name {label!r}")
        self.name = name
        self.help = help_text
        self.labelnames = tuple(labelnames)

    def _key(self, labels: dict[str, str]) -> LabelValues:
        if set(labels) != set(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {tuple(labels)}")
        return tuple(str(labels[n]) for n in self.labelnames)

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {_escape_help(self.help)}", f"# TYPE {self.name} {self.kind}"]

    def samples(self) -> list[str]:
        raise NotImplementedError

    def render(self) -> list[str]:
        return self.header() + self.samples()


class _ValueMetric(_Metric):
    """One number per label set: what counters and gauges share."""

    def __init__(self, name: str, help_text: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, labelnames)
        self.values: dict[LabelValues, float] = {} if labelnames else {(): 0.0}

    def _add(self, amount: float, labels: dict[str, str]) -> None:
        key = self._key(labels)
        self.values[key] = self.values.get(key, 0.0) + amount

    def get(self, **labels: str) -> float:
        return self.values.get(self._key(labels), 0.0)

    def samples(self) -> list[str]:
        return [f"{self.name}{_labels(self.labelnames, k)} {format_value(v)}" for k, v in sorted(self.values.items())]


class Counter(_ValueMetric):
    """A monotonically increasing total; the name must end in `_total`."""

    kind = "counter"

    def __init__(self, name: str, help_text: str, labelnames: Sequence[str] = ()) -> None:
        if not name.endswith("_total"):
            raise ValueError("counter names end in _total")
        super().__init__(name, help_text, labelnames)

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        if amount < 0:
            raise ValueError("counters only go up")
        self._add(amount, labels)


class Gauge(_ValueMetric):
    """A value that goes up and down (set, inc, dec)."""

    kind = "gauge"

    def set(self, value: float, **labels: str) -> None:
        self.values[self._key(labels)] = float(value)

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        self._add(amount, labels)

    def dec(self, amount: float = 1.0, **labels: str) -> None:
        self._add(-amount, labels)


class Histogram(_Metric):
    """Observations counted into fixed upper bounds (`le`), plus their sum and count."""

    kind = "histogram"

    def __init__(self, name: str, help_text: str, buckets: Iterable[float], labelnames: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, labelnames)
        bounds = sorted(float(b) for b in buckets if not math.isinf(b))
        if not bounds or len(set(bounds)) != len(bounds):
            raise ValueError("histogram buckets must be distinct and non-empty")
        self.bounds = bounds
        # Per label set: [per-bucket counts (the last is +Inf), sum]
        self.series: dict[LabelValues, tuple[list[int], list[float]]] = {}
        if not labelnames:
            self._series(())

    def _series(self, key: LabelValues) -> tuple[list[int], list[float]]:
        s = self.series.get(key)
        if s is None:
            s = self.series[key] = ([0] * (len(self.bounds) + 1), [0.0])
        return s

    def observe(self, value: float, **labels: str) -> None:
        counts, total = self._series(self._key(labels))
        counts[bisect.bisect_left(self.bounds, value)] += 1
        total[0] += value

    def count(self, **labels: str) -> int:
        s = self.series.get(self._key(labels))
        return sum(s[0]) if s else 0

    def sum(self, **labels: str) -> float:
        s = self.series.get(self._key(labels))
        return s[1][0] if s else 0.0

    def samples(self) -> list[str]:
        lines = []
        for key, (counts, total) in sorted(self.series.items()):
            running = 0
            for bound, n in zip(self.bounds + [math.inf], counts):
                running += n
                le = format_value(bound)
                lines.append(f"{self.name}_bucket{_labels(self.labelnames, key, ('le', le))} {running}")
            lines.append(f"{self.name}_sum{_labels(self.labelnames, key)} {format_value(total[0])}")
            lines.append(f"{self.name}_count{_labels(self.labelnames, key)} {running}")
        return lines


class Registry:
    """The metrics of one process, rendered in registration order."""

    def __init__(self) -> None:
        self.metrics: dict[str, _Metric] = {}

    def register(self, metric: _Metric) -> _Metric:
        if metric.name in self.metrics:
            raise ValueError(f"metric {metric.name} registered twice")
        self.metrics[metric.name] = metric
        return metric

    def render(self) -> bytes:
        lines: list[str] = []
        for metric in self.metrics.values():
            lines.extend(metric.render())
        return ("\n".join(lines) + "\n").encode()
