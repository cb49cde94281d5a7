"""`{"text", "image"}` request items -> token ids, pixel patches and M-RoPE positions.

Called by TokenizerManager.embed for requests whose input is a list of objects; plain strings and
token ids never come here. Per request: every item is rendered through the chat template and the
prompts are tokenized in one call on the event loop (as the text path does), while each item's
image is fetched in one thread pool and decoded and preprocessed in another, all items at once.
A failing item fails its own request (INVALID_REQUEST) with a message that names the item;
nothing reaches the scheduler then.
"""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from sglang.srt.configs.chat_template import PromptTemplate, load_chat_template
from sglang.srt.configs.model_info import ModelInfo
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.managers.io_struct import MultimodalItem, TokenizedEmbeddingReqInput
from sglang.srt.managers.multimodal.image_fetch import ImageFetchLimits, ImageLoadError, decode_image, read_image_bytes
from sglang.srt.managers.multimodal.processors import (
    Qwen2VLImages,
    expand_image_tokens,
    mrope_positions,
    num_image_tokens,
)
from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)

# Fetching (URLs, files, base64) mostly waits on sockets and disks: many threads, so slow image
# hosts do not queue behind each other. Decoding and preprocessing use the CPU: a few threads
# (Pillow and numpy release the GIL for the heavy parts; more would take turns with the event loop).
FETCH_WORKERS = 32
PROCESS_WORKERS = max(1, min(4, os.cpu_count() or 1))


@dataclass
class PreparedItem:
    input_ids: np.ndarray  # int32 [n], image tokens expanded
    pixel_values: Optional[np.ndarray] = None
    image_grid_thw: Optional[np.ndarray] = None
    mrope_positions: Optional[np.ndarray] = None


def item_error(index: int, message: str) -> EmbeddingError:
    return EmbeddingError(ErrorKind.INVALID_REQUEST, f"Item {index}: {message}", param="input")


class MultimodalPreparer:
    def __init__(self, server_args: ServerArgs, model_info: ModelInfo, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.template: Optional[PromptTemplate] = (
            load_chat_template(server_args.chat_template) if server_args.chat_template else None
        )
        self.context_length = model_info.max_input_length
        self.max_num_tokens = server_args.max_num_tokens
        vision = model_info.vision
        self.images: Optional[Qwen2VLImages] = None
        if vision is not None:
            self.images = Qwen2VLImages(vision.model_dir, server_args.mm_min_pixels, server_args.mm_max_pixels)
            self.image_token_id = vision.image_token_id
            self.merge_size = vision.spatial_merge_size
        self.limits = ImageFetchLimits(
            timeout=server_args.mm_image_timeout,
            max_bytes=server_args.mm_max_image_bytes,
            allowed_local_dir=server_args.allowed_local_media_path,
        )
        self._pools: Optional[tuple[ThreadPoolExecutor, ThreadPoolExecutor]] = None

    @property
    def pools(self) -> tuple[ThreadPoolExecutor, ThreadPoolExecutor]:
        """(fetch, process) thread pools, started with the first image."""
        if self._pools is None:
            self._pools = (
                ThreadPoolExecutor(FETCH_WORKERS, thread_name_prefix="sglang-image-fetch"),
                ThreadPoolExecutor(PROCESS_WORKERS, thread_name_prefix="sglang-image-process"),
            )
        return self._pools

    def close(self) -> None:
        for pool in self._pools or ():
            pool.shutdown(wait=False, cancel_futures=True)

    # ----- the request path -----
    async def prepare(self, items: Sequence[MultimodalItem]) -> list[PreparedItem]:
        if not items:
            raise EmbeddingError(ErrorKind.INVALID_REQUEST, "Input cannot be empty.", param="input")
        prompts = [self._render(i, item) for i, item in enumerate(items)]
        loads = {
            i: asyncio.ensure_future(self._load(item.image)) for i, item in enumerate(items) if item.image is not None
        }
        try:
            ids = self._tokenize(prompts)
        finally:
            results = await asyncio.gather(*loads.values(), return_exceptions=True) if loads else []
        images = dict(zip(loads, results))
        for i in sorted(images):  # the first failing item, by index
            err = images[i]
            if isinstance(err, ImageLoadError):
                raise item_error(i, f"could not load image: {err}")
            if isinstance(err, BaseException):  # a bug on our side, not a bad image
                logger.error("image preprocessing of item %d failed: %r", i, err)
                raise EmbeddingError(
                    ErrorKind.INTERNAL,
                    f"Item {i}: internal error while processing the image: {type(err).__name__}: {err}",
                )
        return [self._finish(i, ids[i], images.get(i)) for i in range(len(items))]

    def _render(self, index: int, item: MultimodalItem) -> str:
        if item.image is None and not (item.text and item.text.strip()):
            raise item_error(index, "needs a non-empty 'text' or an 'image'.")
        if item.text and not item.text.isascii():
            try:
                item.text.encode("utf-8")
            except UnicodeEncodeError:  # JSON "\ud800" escapes decode to lone surrogates
                raise item_error(index, "the text is not valid Unicode (it holds a lone surrogate).") from None
        if item.image is not None:
            if self.images is None:
                raise item_error(index, "this model does not take image inputs.")
            if self.template is None:
                raise item_error(
                    index,
                    "image inputs need a chat template; start the server with --chat-template (e.g. gme-qwen2-vl).",
                )
        if self.template is None:
            return item.text
        try:
            return self.template.render(item.text, item.image is not None)
        except Exception as e:  # a Jinja template's own raise_exception, or a missing placeholder
            raise item_error(index, f"the chat template failed: {e}") from None

    def _tokenize(self, prompts: list[str]) -> list[np.ndarray]:
        # A template writes its special tokens itself; without one an item is a plain string.
        enc = self.tokenizer(
            prompts, add_special_tokens=self.template is None, return_attention_mask=False, return_token_type_ids=False
        )
        return [np.asarray(x, dtype=np.int32) for x in enc["input_ids"]]

    async def _load(self, source: str) -> tuple[np.ndarray, np.ndarray]:
        """Fetch one image in the fetch pool, then decode, resize and patchify it in the process pool."""
        loop = asyncio.get_running_loop()
        fetch, process = self.pools
        data = await loop.run_in_executor(fetch, read_image_bytes, source, self.limits)
        return await loop.run_in_executor(process, self._process, data)

    def _process(self, data: bytes) -> tuple[np.ndarray, np.ndarray]:
        image = decode_image(data, self.limits)
        try:
            return self.images(image)
        except ValueError as e:  # e.g. an aspect ratio over 200
            raise ImageLoadError(f"cannot preprocess it: {e}") from None

    def _finish(self, index: int, ids: np.ndarray, image: Optional[tuple[np.ndarray, np.ndarray]]) -> PreparedItem:
        placeholders = int(np.count_nonzero(ids == self.image_token_id)) if self.images is not None else 0
        if placeholders != (1 if image is not None else 0):
            if image is None:
                raise item_error(index, "the text contains the image placeholder token.")
            raise item_error(
                index,
                f"the prompt holds {placeholders} image placeholder tokens, expected one "
                "(the text may contain it, or the chat template may lack it).",
            )
        out = PreparedItem(ids)
        image_tokens = 0
        if image is not None:
            pixels, grid = image
            image_tokens = num_image_tokens(grid, self.merge_size)
            out.input_ids = expand_image_tokens(ids, self.image_token_id, [image_tokens])
            out.pixel_values, out.image_grid_thw = pixels, grid
            out.mrope_positions = mrope_positions(out.input_ids, self.image_token_id, [grid], self.merge_size)
        n = len(out.input_ids)
        of_image = f", {image_tokens} of them for the image" if image_tokens else ""
        if n > self.context_length:
            raise item_error(
                index,
                f"the input ({n} tokens{of_image}) is longer than the model's context "
                f"length ({self.context_length} tokens).",
            )
        if n > self.max_num_tokens:
            raise item_error(
                index,
                f"the input ({n} tokens{of_image}) is longer than the server's per-batch "
                f"token budget (--max-num-tokens {self.max_num_tokens}).",
            )
        return out


def attach(reqs: Sequence[TokenizedEmbeddingReqInput], prepared: Sequence[PreparedItem]) -> None:
    """Copy the image fields of prepared items onto their tokenized messages."""
    for r, p in zip(reqs, prepared):
        r.pixel_values, r.image_grid_thw, r.mrope_positions = p.pixel_values, p.image_grid_thw, p.mrope_positions
