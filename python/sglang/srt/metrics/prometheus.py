"""Counters, gauges and histograms on prometheus-client, summed over every process of a server.

A server runs prometheus-client's multiprocess mode: `enable_multiprocess(dir)` (launch.py, with
a directory inside the server's private IPC directory, so it is new at every start and removed at
shutdown) makes this process and every child spawned after it write its samples into files there,
and `Registry.render` on any HTTP worker reads them all. One scrape therefore reports the whole
server: every HTTP worker's requests and the scheduler's queue and batches. Outside a server
(the offline Engine, unit tests) metrics stay in memory and a registry renders its own.

The wrappers keep the project's small interface (`inc(**labels)`, `get(**labels)`, ...) so call
sites do not touch `.labels(...)` children. `constant` labels (the served model's name, a replica's
rank) are bound once when a metric is made and added to every sample: in multiprocess mode a sample's
slot in the files is keyed by its name and label values, so two metric sets of one name (one per
served model in one process) keep separate totals only if their constant labels differ.
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping, Optional, Sequence

import prometheus_client
from prometheus_client import CollectorRegistry, generate_latest, values
from prometheus_client.multiprocess import MultiProcessCollector

# The classic text format (generate_latest writes it); Prometheus scrapes it everywhere.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# No `*_created` series: the names and labels /metrics serves stay what docs/operations.md lists.
prometheus_client.disable_created_metrics()


def enable_multiprocess(directory: str) -> None:
    """This process, and every process spawned after this call, write metrics under `directory`."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    os.environ[MULTIPROC_ENV] = directory
    # prometheus-client picks its value store when first imported; pick again now that the
    # directory is known (metrics created from here on write to it).
    values.ValueClass = values.get_value_class()


def multiprocess_dir() -> Optional[str]:
    return os.environ.get(MULTIPROC_ENV) or None


Labels = Optional[Mapping[str, str]]


def _names(labelnames: Sequence[str], constant: Labels) -> tuple[str, ...]:
    """The label names prometheus-client is given: the constant ones first, then the call sites'."""
    fixed = tuple(constant or ())
    shared = set(fixed) & set(labelnames)
    if shared:
        raise ValueError(f"labels {sorted(shared)} are both constant and per call")
    return fixed + tuple(labelnames)


class _Metric:
    """Call sites' labels -> prometheus-client's child, looked up once per label set: `labels()`
    checks and joins the values on every call, which on the HTTP process's nine metric calls per
    request cost about as much as the samples' writes themselves."""

    def __init__(self, metric, labelnames: Sequence[str], constant: Labels = None) -> None:
        self._metric = metric
        self.labelnames = tuple(labelnames)  # what each call passes
        self.constant = {k: str(v) for k, v in (constant or {}).items()}
        self._children: dict[tuple, object] = {}
        if self.constant and not self.labelnames:
            self._child({})  # the one series exists (at zero) from the start, as an unlabelled metric's does

    def _child(self, labels: dict[str, str]):
        key = tuple(labels.items())  # label sets are few (routes x statuses): the cache stays small
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._new_child(labels)
        return child

    def _new_child(self, labels: dict[str, str]):
        if set(labels) != set(self.labelnames):
            raise ValueError(f"{self._metric._name} takes labels {self.labelnames}, got {tuple(labels)}")
        if not self.labelnames and not self.constant:
            return self._metric
        return self._metric.labels(**self.constant, **{k: str(v) for k, v in labels.items()})


class Counter(_Metric):
    """A total that only goes up; the name ends in `_total`."""

    def __init__(
        self, name: str, help_text: str, labelnames: Sequence[str] = (), registry=None, constant: Labels = None
    ) -> None:
        if not name.endswith("_total"):
            raise ValueError("counter names end in _total")
        counter = prometheus_client.Counter(name, help_text, _names(labelnames, constant), registry=registry)
        super().__init__(counter, labelnames, constant)
        self.name = name

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        self._child(labels).inc(amount)

    def get(self, **labels: str) -> float:
        return self._child(labels)._value.get()


class Gauge(_Metric):
    """A value that goes up and down. `mode` says how the processes' values combine in a scrape
    (prometheus-client's multiprocess_mode: `livesum` adds the processes that are alive)."""

    def __init__(
        self,
        name: str,
        help_text: str,
        labelnames: Sequence[str] = (),
        registry=None,
        mode: str = "livesum",
        constant: Labels = None,
    ) -> None:
        names = _names(labelnames, constant)
        gauge = prometheus_client.Gauge(name, help_text, names, registry=registry, multiprocess_mode=mode)
        super().__init__(gauge, labelnames, constant)
        self.name = name

    def set(self, value: float, **labels: str) -> None:
        self._child(labels).set(value)

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        self._child(labels).inc(amount)

    def dec(self, amount: float = 1.0, **labels: str) -> None:
        self._child(labels).dec(amount)

    def get(self, **labels: str) -> float:
        return self._child(labels)._value.get()


class Histogram(_Metric):
    """Observations counted into fixed upper bounds (`le`), plus their sum and count."""

    def __init__(
        self,
        name: str,
        help_text: str,
        buckets: Iterable[float],
        labelnames: Sequence[str] = (),
        registry=None,
        constant: Labels = None,
    ) -> None:
        bounds = sorted(float(b) for b in buckets)
        names = _names(labelnames, constant)
        hist = prometheus_client.Histogram(name, help_text, names, registry=registry, buckets=bounds)
        super().__init__(hist, labelnames, constant)
        self.name = name

    def observe(self, value: float, **labels: str) -> None:
        self._child(labels).observe(value)

    def count(self, **labels: str) -> int:
        return int(sum(b.get() for b in self._child(labels)._buckets))

    def sum(self, **labels: str) -> float:
        return self._child(labels)._sum.get()


class Registry:
    """The metrics one component declares; `render` is what GET /metrics serves."""

    def __init__(self) -> None:
        self.collectors = CollectorRegistry(auto_describe=True)

    def render(self) -> bytes:
        """The whole server's samples in multiprocess mode, else this registry's own."""
        directory = multiprocess_dir()
        if directory is None:
            return generate_latest(self.collectors)
        merged = CollectorRegistry()
        MultiProcessCollector(merged, path=directory)
        return generate_latest(merged)
