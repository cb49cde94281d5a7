"""Tiny random CLIP / SigLIP / SigLIP 2 checkpoints (config, safetensors, tokenizer, image
processor) saved by transformers itself, and their reference embeddings from transformers.

Sizes: both towers 2 layers, hidden 32, 4 heads; images 32x32 in 8x8 patches (CLIP: 1 + 16
tokens, SigLIP: 16), SigLIP 2 at most 16 patches of 8x8 keeping the aspect ratio; SigLIP's text
is padded to 32 positions (SigLIP 2's and the real ones: 64).
"""

from __future__ import annotations

import os
from typing import Optional, Sequence

import numpy as np
import torch

from test.helpers.tiny_models import WORDS

START, END, PAD, UNK = "<|startoftext|>", "<|endoftext|>", "<pad>", "<unk>"
SIGLIP_TEXT_POSITIONS = 32


def build_tokenizer(out_dir: str, start: Optional[str]) -> dict[str, int]:
    """Byte-level BPE over WORDS that writes `[start] text END` (CLIP: with the start token;
    SigLIP: text then </s>-like END), with a separate PAD token. Returns the special ids."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors, trainers
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    specials = [PAD, END, UNK] + ([start] if start else [])
    tok = Tokenizer(BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=specials,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([" ".join(WORDS)] * 3 + WORDS, trainer)
    ids = {t: tok.token_to_id(t) for t in specials}
    single = f"{start} $A {END}" if start else f"$A {END}"
    tok.post_processor = processors.TemplateProcessing(
        single=single, special_tokens=[(t, ids[t]) for t in specials if t not in (PAD, UNK)]
    )
    kwargs = {"bos_token": start} if start else {}
    PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=END, pad_token=PAD, unk_token=UNK, **kwargs
    ).save_pretrained(out_dir)
    return ids


def build_siglip_tokenizer(out_dir: str) -> dict[str, int]:
    """SigLIP's own SiglipTokenizer (sentencepiece, `</s>` appended, `</s>` also the pad token,
    right padding, as google/siglip-* ship it) over a sentencepiece model trained on WORDS."""
    import sentencepiece as spm
    from transformers import SiglipTokenizer

    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([" ".join(WORDS)] * 3 + WORDS),
        model_prefix=os.path.join(out_dir, "spiece"),
        vocab_size=200,
        hard_vocab_limit=False,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        minloglevel=2,
    )
    tok = SiglipTokenizer(vocab_file=os.path.join(out_dir, "spiece.model"))
    tok.save_pretrained(out_dir)
    return {END: tok.eos_token_id, PAD: tok.pad_token_id}


def _randomize(model: torch.nn.Module, seed: int) -> None:
    """Every weight random, norms near one, so a misplaced tensor shows in the parity tests."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            is_norm = ("norm" in name) and name.endswith(".weight")
            p.copy_(1.0 + 0.1 * noise if is_norm else 0.3 * noise)


def _towers(vocab: int, ids: dict[str, int], text_positions: int, **vision) -> tuple[dict, dict]:
    text = dict(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=text_positions,
        eos_token_id=ids[END],
        pad_token_id=ids[PAD],
        bos_token_id=ids[END],
    )
    image = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, patch_size=8)
    image.update(vision)
    return text, image


def build_tiny_clip(out_dir: str, seed: int = 0) -> str:
    from transformers import AutoTokenizer, CLIPConfig, CLIPModel
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    os.makedirs(out_dir, exist_ok=True)
    ids = build_tokenizer(out_dir, START)
    text, image = _towers(len(AutoTokenizer.from_pretrained(out_dir)), ids, 32, image_size=32)
    text["bos_token_id"] = ids[START]
    config = CLIPConfig(text_config=text, vision_config=image, projection_dim=24)
    torch.manual_seed(seed)
    model = CLIPModel(config).eval()
    _randomize(model, seed)
    model.save_pretrained(out_dir)
    CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(out_dir)
    return out_dir


def build_tiny_siglip(out_dir: str, seed: int = 0, version: int = 1) -> str:
    """SigLIP (version 1, with SigLIP's sentencepiece tokenizer) or SigLIP 2 (version 2, NaFlex
    images of up to 16 patches, a BPE tokenizer that transformers loads as its Gemma-based
    Siglip2Tokenizer, which pads on the left)."""
    from transformers import AutoTokenizer

    os.makedirs(out_dir, exist_ok=True)
    if version == 1:
        ids = build_siglip_tokenizer(out_dir)
    else:
        ids = build_tokenizer(out_dir, None)
    vocab = len(AutoTokenizer.from_pretrained(out_dir))
    torch.manual_seed(seed)
    if version == 1:
        from transformers import SiglipConfig, SiglipModel
        from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

        text, image = _towers(vocab, ids, SIGLIP_TEXT_POSITIONS, image_size=32)
        model = SiglipModel(SiglipConfig(text_config=text, vision_config=image)).eval()
        processor = SiglipImageProcessorPil(size={"height": 32, "width": 32})
    else:
        from transformers import Siglip2Config, Siglip2Model
        from transformers.models.siglip2.image_processing_pil_siglip2 import Siglip2ImageProcessorPil

        # Its AutoTokenizer is Gemma's, which splits our test vocabulary into more tokens: 64 positions.
        text, image = _towers(vocab, ids, 64, num_patches=16)
        model = Siglip2Model(Siglip2Config(text_config=text, vision_config=image)).eval()
        processor = Siglip2ImageProcessorPil(patch_size=8, max_num_patches=16)
    _randomize(model, seed)
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return out_dir


# ----- the reference -----
def build_tiny_towers(root: str) -> dict[str, str]:
    """A tiny random CLIP, SigLIP and SigLIP 2 under `root`: {"clip" | "siglip" | "siglip2": model dir}."""
    return {
        "clip": build_tiny_clip(os.path.join(root, "clip")),
        "siglip": build_tiny_siglip(os.path.join(root, "siglip")),
        "siglip2": build_tiny_siglip(os.path.join(root, "siglip2"), version=2),
    }


def load_reference(model_dir: str):
    from transformers import AutoImageProcessor, AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager", dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(model_dir), AutoImageProcessor.from_pretrained(model_dir)


def _features(out) -> torch.Tensor:
    return out if torch.is_tensor(out) else out.pooler_output


@torch.inference_mode()
def reference_text(ref, texts: Sequence[str]) -> np.ndarray:
    """transformers' get_text_features, L2-normalized: CLIP with padding and its attention mask;
    SigLIP padded to max_length with no mask, as its model card and processor do."""
    model, tok, _ = ref
    if model.config.model_type == "clip":
        enc = tok(list(texts), padding=True, return_tensors="pt")
        out = model.get_text_features(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
    else:
        positions = model.config.text_config.max_position_embeddings
        enc = tok(list(texts), padding="max_length", max_length=positions, return_tensors="pt")
        out = model.get_text_features(input_ids=enc["input_ids"])
    return torch.nn.functional.normalize(_features(out), dim=-1).numpy()


@torch.inference_mode()
def reference_images(ref, images) -> np.ndarray:
    """transformers' get_image_features on the checkpoint's image processor output, normalized."""
    model, _, processor = ref
    enc = processor(images=list(images), return_tensors="pt")
    out = model.get_image_features(**enc)
    return torch.nn.functional.normalize(_features(out), dim=-1).numpy()
