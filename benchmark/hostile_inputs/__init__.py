"""Hostile-input probes against a live server on loopback (issue #15): `python -m benchmark.hostile_inputs`.

One module per area; each exposes `run(ctx) -> list[Result]` and the runner (`__main__.py`) calls
every module of this package that has one, so an area is added by adding a file.
"""
