"""RoBERTa / XLM-RoBERTa encoders (BAAI/bge-m3, intfloat/multilingual-e5-*, bge-reranker-v2-m3).

The layers are BERT's; only the numbering of positions differs. RoBERTa reserves the first
`padding_idx + 1` rows of its position table, so token i of a sequence reads row
`padding_idx + 1 + i` (transformers' `create_position_ids_from_input_ids`), which is why the
registry gives this family a `padding_offset` and its context length is `max_position_embeddings
- padding_idx - 1` (512 for 514-row tables). transformers gives a pad token *inside* an input row
`padding_idx` instead; inputs never contain pad tokens here (batches are packed, not padded).

Checkpoints nest the encoder under `roberta.` (the *ForMaskedLM / *ForSequenceClassification
variants) or not at all (XLMRobertaModel); BertModel's renaming strips either.
"""

from __future__ import annotations

from sglang.srt.models.bert import BertModel


class XLMRobertaModel(BertModel):
    """BertModel built with the RoBERTa position offset (passed by the loader from the registry)."""

    def __init__(self, config, position_offset: int = 2) -> None:
        super().__init__(config, position_offset=position_offset)
