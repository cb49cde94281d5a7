"""Prometheus metrics: a small text-exposition implementation (`prometheus`) and the server's metric set."""
