"""`{"text", "image"}` request items -> token ids, pixel patches and M-RoPE positions.

Called by TokenizerManager.embed for requests whose input is a list of objects; plain strings and
token ids never come here. Per request: every image string is checked first (a malformed one is
refused before any work), every item is rendered through the chat template and the prompts are
tokenized in one call on the event loop (as the text path does), while the images load
(image_loader.py). A failing item fails its own request with a message that names the item
(400; 429 when the process's image memory is full); nothing reaches the scheduler then. An image
URL that fails gets one generic message, its reason goes to the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import ContextManager, Optional, Sequence

import numpy as np

from sglang.srt.configs.chat_template import PromptTemplate, load_chat_template
from sglang.srt.configs.model_info import ImagePath, ModelInfo
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.multimodal.image_errors import (
    URL_FAILED_MESSAGE,
    FetchFailed,
    ImageLoadError,
    ImageMemoryFull,
)
from sglang.srt.frontend.multimodal.image_loader import ImageLoader, ImageResult, LoadFailed
from sglang.srt.frontend.multimodal.image_source import (
    LOCAL_FILES_DISABLED,
    FileSource,
    ImageSource,
    UrlSource,
    parse_image_source,
)
from sglang.srt.frontend.multimodal.processors import (
    Qwen2VLImages,
    expand_image_tokens,
    mrope_positions,
    num_image_tokens,
)
from sglang.srt.frontend.multimodal.tower_images import TowerImages
from sglang.srt.server_args import ServerArgs
from sglang.srt.wire.io_struct import MultimodalItem, TokenizedEmbeddingReqInput

logger = logging.getLogger(__name__)


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
        self.loader: Optional[ImageLoader] = None
        # CLIP / SigLIP: an item is a text or an image, the image going to the model's image tower.
        self.towers: Optional[TowerImages] = None
        if model_info.image_path is ImagePath.TOWER:
            self.towers = TowerImages(vision.model_dir, vision.patch_size, vision.class_token, vision.image_tokens)
            self.loader = ImageLoader(server_args, self.towers)
        elif model_info.image_path is ImagePath.LM_TOKENS:
            self.images = Qwen2VLImages(vision.model_dir, server_args.mm_min_pixels, server_args.mm_max_pixels)
            self.image_token_id = vision.image_token_id
            self.merge_size = vision.spatial_merge_size
            self.loader = ImageLoader(server_args, self.images)

    def close(self) -> None:
        if self.loader is not None:
            self.loader.close()

    def request_in_flight(self) -> ContextManager[None]:
        """Held by a request with items until it is answered: when the last such request ends, the
        process gives its freed image memory back (image_heap_trim.py)."""
        return self.loader.trimmer.request_in_flight() if self.loader is not None else contextlib.nullcontext()

    # ----- the request path -----
    async def prepare(self, items: Sequence[MultimodalItem]) -> list[PreparedItem]:
        if not items:
            raise EmbeddingError(ErrorKind.INVALID_REQUEST, "Input cannot be empty.", param="input")
        prompts = [self._render(i, item) for i, item in enumerate(items)]
        sources = {i: self._source(i, item.image) for i, item in enumerate(items) if item.image is not None}
        loads = asyncio.ensure_future(self.loader.load_all(sources)) if sources else None
        try:
            ids = self._tokenize(prompts)
        except BaseException:
            if loads is not None:  # stop the loads and let them give their memory back
                loads.cancel()
                await asyncio.gather(loads, return_exceptions=True)
            raise
        images = await self._images(loads) if loads is not None else {}
        return [self._finish(i, ids[i], images.get(i)) for i in range(len(items))]

    def _source(self, index: int, image: str) -> ImageSource:
        try:
            source = parse_image_source(image)
        except ImageLoadError as e:
            raise item_error(index, f"could not load image: {e}") from None
        if isinstance(source, UrlSource) and not self.loader.urls_enabled:
            raise item_error(
                index, "image URLs are disabled on this server (--mm-disable-url-fetch); send a data URI or base64"
            )
        if isinstance(source, FileSource) and self.loader.allowed_local_dir is None:
            raise item_error(index, f"could not load image: {LOCAL_FILES_DISABLED}")
        return source

    async def _images(self, loads: "asyncio.Future[dict[int, ImageResult]]") -> dict[int, ImageResult]:
        try:
            return await loads
        except LoadFailed as failed:
            raise load_failed_error(failed) from None

    def _render(self, index: int, item: MultimodalItem) -> str:
        if item.image is None and not (item.text and item.text.strip()):
            raise item_error(index, "needs a non-empty 'text' or an 'image'.")
        if item.text and not item.text.isascii():
            try:
                item.text.encode("utf-8")
            except UnicodeEncodeError:  # JSON "\ud800" escapes decode to lone surrogates
                raise item_error(index, "the text is not valid Unicode (it holds a lone surrogate).") from None
        if self.towers is not None and item.image is not None:
            if item.text:
                raise item_error(
                    index, "this model embeds a text or an image per item, not both; send them as two items."
                )
            return ""  # the image tower needs no prompt
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

    def _finish(self, index: int, ids: np.ndarray, image: Optional[tuple]) -> PreparedItem:
        if self.towers is not None:
            return self._finish_tower_item(index, ids, image)
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

    def _finish_tower_item(self, index: int, ids: np.ndarray, image: Optional[tuple]) -> PreparedItem:
        """A text item keeps its tokens; an image item gets one placeholder id per token of its
        image-tower sequence, so budgets and usage count the image's real length."""
        if image is None:
            if len(ids) > self.context_length:
                raise item_error(
                    index,
                    f"the input ({len(ids)} tokens) is longer than the model's context length "
                    f"({self.context_length} tokens).",
                )
            return PreparedItem(ids)
        pixels, grid = image
        tokens = self.towers.num_tokens(grid)
        if tokens > self.max_num_tokens:
            raise item_error(
                index,
                f"the image ({tokens} tokens) is longer than the server's per-batch token budget "
                f"(--max-num-tokens {self.max_num_tokens}).",
            )
        return PreparedItem(np.zeros(tokens, dtype=np.int32), pixel_values=pixels, image_grid_thw=grid)


def load_failed_error(failed: LoadFailed) -> EmbeddingError:
    """The client's error for a failed image (a URL's reason is only logged): 400 naming the item,
    429 when the process's image memory is busy, 500 for a bug on our side."""
    i, err = failed.index, failed.error
    if isinstance(err, ImageMemoryFull):
        if err.own_request:
            return item_error(
                i,
                f"the request's images need more than --mm-max-bytes-in-flight ({err.limit} bytes) at once; "
                "send fewer or smaller images per request.",
            )
        return EmbeddingError(
            ErrorKind.QUEUE_FULL,
            f"Item {i}: the server is holding too many images right now (--mm-max-bytes-in-flight); retry later.",
            param="input",
        )
    if failed.from_url and isinstance(err, (FetchFailed, ImageLoadError)):
        logger.info("image URL of item %d failed: %s", i, err)
        return item_error(i, f"could not load image: {URL_FAILED_MESSAGE}")
    if isinstance(err, ImageLoadError):
        return item_error(i, f"could not load image: {err}")
    logger.error("image preprocessing of item %d failed: %r", i, err)  # a bug on our side, not a bad image
    kind = type(err).__name__
    return EmbeddingError(ErrorKind.INTERNAL, f"Item {i}: internal error while processing the image ({kind})")


def attach(reqs: Sequence[TokenizedEmbeddingReqInput], prepared: Sequence[PreparedItem]) -> None:
    """Copy the image fields of prepared items onto their tokenized messages."""
    for r, p in zip(reqs, prepared):
        r.pixel_values, r.image_grid_thw, r.mrope_positions = p.pixel_values, p.image_grid_thw, p.mrope_positions
