"""vLLM's extra routes: /pooling, /tokenize (its `prompt` form), /detokenize."""
