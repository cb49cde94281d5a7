"""Qwen2-VL (GME: gme-Qwen2-VL-*-Instruct) as an embedding model over text, images, or both.

The vision tower (models/qwen2_vl_vision.py) turns every image of the batch into merged patch
embeddings in one forward; `embed(fb)` writes them over the `<|image_pad|>` rows of the token
embeddings; the decoder is the shared Qwen2 one (models/decoder.py) with M-RoPE. Pooling (last token)
and normalization happen in the runner, as for the text decoders.

`embed` holds everything image-specific, so `run_layers(hidden, fb)` stays the decoder's layer stack,
the part CUDA graphs capture. Text-only batches carry 1-D positions and can replay a graph; batches
with images carry M-RoPE positions [3, T], which the graph runner sends down the eager path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional

import torch
from torch import nn

from sglang.srt.layers.rotary_embedding import MRotaryEmbedding
from sglang.srt.model_loader.weight_utils import load_weights_into
from sglang.srt.models.decoder import DECODER_STACKED_PARAMS, Qwen2Model, head_dim_of
from sglang.srt.models.qwen2_vl_vision import Qwen2VisionTransformer

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch import ForwardBatch


class Qwen2VLForConditionalGeneration(nn.Module):
    """Returns per-token hidden states [T, hidden] after the decoder's final norm."""

    # Checkpoint tensors never read: the LM head (an embedding model has no use for logits).
    skip_checkpoint_prefixes = ("lm_head.",)

    def __init__(self, config, max_positions: Optional[int] = None) -> None:
        super().__init__()
        self.config = config
        text_config = config.get_text_config()
        self.image_token_id = int(config.image_token_id)
        self.visual = Qwen2VisionTransformer(config.vision_config)
        self.language_model = Qwen2Model(text_config, max_positions)
        # Same frequencies and table as the decoder's RoPE; only the lookup learns 3-D positions.
        self.language_model.rotary_emb = MRotaryEmbedding.from_config(
            text_config, head_dim_of(text_config), max_positions
        )

    def embed(self, fb: ForwardBatch) -> torch.Tensor:
        """Token embeddings, with the vision tower's output in the rows of the image pad tokens."""
        hidden = self.language_model.embed(fb)
        if fb.pixel_values is None:
            return hidden
        features = self.visual(fb.pixel_values, fb.image_grid_thw)
        if features.shape[0] != fb.image_token_index.shape[0]:  # both known on the host: no sync
            raise ValueError(f"{features.shape[0]} image features for {fb.image_token_index.shape[0]} image tokens")
        return hidden.index_copy(0, fb.image_token_index, features.to(hidden.dtype))

    def run_layers(self, hidden: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        """The decoder layers and final norm; fb.positions is [T] or M-RoPE [3, T]."""
        return self.language_model.run_layers(hidden, fb)

    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        return self.run_layers(self.embed(fb), fb)

    @staticmethod
    def _rename(name: str) -> Optional[str]:
        """transformers 4 / GME layout (`model.layers...`, `visual...`) and transformers 5 layout
        (`model.language_model.layers...`, `model.visual...`) onto ours."""
        for prefix, ours in (
            ("model.language_model.", "language_model."),
            ("model.visual.", "visual."),
            ("visual.", "visual."),
            ("model.", "language_model."),
        ):
            if name.startswith(prefix):
                return ours + name[len(prefix) :]
        return None  # lm_head and anything else we never run

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return load_weights_into(self, weights, DECODER_STACKED_PARAMS, self._rename)
