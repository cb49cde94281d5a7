"""sglang-embed: an SGLang-style serving engine for embedding models."""

__version__ = "0.1.0"

__all__ = ["Engine", "SentenceTransformer", "__version__"]


def __getattr__(name: str):
    # Lazy, so `import sglang` stays cheap for the CLI and child processes.
    if name == "Engine":
        from sglang.srt.entrypoints.engine import Engine

        return Engine
    if name == "SentenceTransformer":  # sentence-transformers' model object on the Engine
        from sglang.srt.entrypoints.sentence_transformer import SentenceTransformer

        return SentenceTransformer
    raise AttributeError(f"module 'sglang' has no attribute {name!r}")
