"""Glue between sglang-embed and the tools that run it at scale (each needs its own extra)."""
