"""Cohere's POST /v2/embed (texts, images or mixed inputs; input_type; embedding_types)."""
