"""Every route asks ModelInfo.capabilities what the model can do (configs/model_info.Capability):
the routes' refusals and descriptions for each kind of model, without a server."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from sglang.srt.configs.colbert_config import ColbertConfig
from sglang.srt.configs.model_info import ImagePath, ModelInfo, OutputKind, VisionInfo
from sglang.srt.errors import EmbeddingError
from sglang.srt.frontend.compat_routes import infinity_capabilities
from sglang.srt.frontend.http.error_styles import TeiError
from sglang.srt.frontend.openai.serving_embed_all import check_per_token_model
from sglang.srt.frontend.openai.serving_rerank import OpenAIServingRerank
from sglang.srt.frontend.openai.serving_sparse import ServingSparseEmbedding
from sglang.srt.frontend.openai.task_protocol import SparseEmbedRequest
from sglang.srt.frontend.tei.protocol import EmbedRequest, PredictRequest
from sglang.srt.frontend.tei.routes import tei_info
from sglang.srt.frontend.tei.serving import TeiServingEmbed, TeiServingPredict
from sglang.srt.server_args import ServerArgs
from test.helpers.model_info import make_model_info

MODELS = {
    "embedding": make_model_info(),
    "cross_encoder": make_model_info(embeddings_output=OutputKind.LOGITS, labels=("score",), embedding_dim=1),
    "classifier": make_model_info(embeddings_output=OutputKind.LOGITS, labels=("neg", "pos"), embedding_dim=2),
    "splade": make_model_info(embeddings_output=OutputKind.SPARSE, sparse_head="splade"),
    "colbert": make_model_info(embeddings_output=OutputKind.MULTI_VECTOR, colbert=ColbertConfig("checkpoint")),
    "clip": make_model_info(vision=VisionInfo(model_dir="/m", kind=ImagePath.TOWER, patch_size=16)),
}


class Reached(Exception):
    """The route passed its checks and asked the tokenizer manager to embed."""


async def embed(req):
    raise Reached


def serving(cls, info: ModelInfo):
    return cls(SimpleNamespace(model_info=info, server_args=ServerArgs(), embed=embed), "m")


def refused(fn) -> bool:
    try:
        fn()
    except EmbeddingError:
        return True
    return False


@pytest.mark.parametrize(
    "model, embed, predict, sparse, per_token, infinity, tei_kind",
    [
        ("embedding", True, False, False, True, ["embed"], "embedding"),
        ("cross_encoder", False, True, False, False, ["classify", "rerank"], "reranker"),
        ("classifier", False, True, False, False, ["classify"], "classifier"),
        ("splade", False, False, True, True, ["embed"], "embedding"),
        ("colbert", False, False, False, True, ["embed"], "embedding"),
        ("clip", True, False, False, False, ["embed", "image_embed"], "embedding"),
    ],
)
def test_routes_follow_the_capabilities(model, embed, predict, sparse, per_token, infinity, tei_kind):
    info = MODELS[model]
    tei_embed = serving(TeiServingEmbed, info)
    assert refused(lambda: tei_embed.validate(EmbedRequest(inputs="x"))) is not embed
    tei_predict = serving(TeiServingPredict, info)
    predict_refusal = None
    try:
        asyncio.run(tei_predict.handle(PredictRequest(inputs="x")))
    except TeiError as e:
        predict_refusal = e
    except Reached:
        pass
    assert (predict_refusal is None) is predict
    if predict_refusal is not None:
        assert predict_refusal.status == 424 and predict_refusal.error_type == "Backend"
    embed_sparse = serving(ServingSparseEmbedding, info)
    assert refused(lambda: embed_sparse.validate(SparseEmbedRequest(inputs="x"))) is not sparse
    assert refused(lambda: check_per_token_model(info, "m", "/embed_all")) is not per_token
    assert infinity_capabilities(info) == infinity
    assert list(tei_info(ServerArgs(), info, "0")["model_type"]) == [tei_kind]


def test_rerank_by_maxsim_only_with_a_multi_vector_head():
    assert serving(OpenAIServingRerank, MODELS["colbert"]).maxsim is not None
    assert serving(OpenAIServingRerank, MODELS["cross_encoder"]).maxsim is None
    assert serving(OpenAIServingRerank, MODELS["embedding"]).maxsim is None
