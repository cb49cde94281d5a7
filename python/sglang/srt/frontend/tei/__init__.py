"""text-embeddings-inference (TEI) compatible routes: /embed, /rerank, /predict, /tokenize, /decode,
/info and the root route huggingface_hub's InferenceClient posts to."""
