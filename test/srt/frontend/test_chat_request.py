"""vLLM's chat-form embedding requests (frontend/openai/chat_request.py): what a conversation
becomes (text rendered by a Jinja template, by the tokenizer's own, or `role: content` lines; or
one {"text", "image"} item on image models), and every refusal, without a server."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError

from sglang.srt.configs.chat_template import load_chat_template
from sglang.srt.configs.model_info import VisionInfo
from sglang.srt.errors import EmbeddingError
from sglang.srt.frontend.openai.chat_request import ChatRequests
from sglang.srt.frontend.openai.protocol import EmbeddingRequest, MultimodalEmbeddingInput
from sglang.srt.frontend.openai.serving_embedding import embedding_request_input
from test.helpers.model_info import make_model_info

TEXT_MODEL = make_model_info()
IMAGE_MODEL = make_model_info(vision=VisionInfo(model_dir="/m", image_token_id=5, spatial_merge_size=2))
TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}{{ suffix | default('') }}"
)
CONVERSATION = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "there"}]},
]


class Recording:
    """The bundled MiniLM tokenizer (which has no chat template of its own unless given one),
    recording what apply_chat_template is called with."""

    def __init__(self, chat_template=None) -> None:
        from sglang.srt.server_args import default_model_path
        from sglang.srt.utils.hf_tokenizer import load_tokenizer

        self.tok = load_tokenizer(default_model_path(), False)
        self.tok.chat_template = chat_template
        self.chat_template = chat_template
        self.calls: list[dict] = []

    def apply_chat_template(self, conversation, **kwargs):
        self.calls.append({"conversation": conversation, **kwargs})
        return self.tok.apply_chat_template(conversation, **kwargs)


def _request(**body) -> EmbeddingRequest:
    return EmbeddingRequest.model_validate({"messages": CONVERSATION, **body})


def _as_input(chat: ChatRequests, request: EmbeddingRequest) -> EmbeddingRequest:
    return asyncio.run(chat.as_input(request))


@pytest.fixture
def jinja(tmp_path):
    path = tmp_path / "t.jinja"
    path.write_text(TEMPLATE)
    return load_chat_template(str(path))


def test_no_template_renders_role_lines_without_special_tokens():
    out = _as_input(ChatRequests(Recording(), None, TEXT_MODEL), _request())
    assert out.input == "system: be brief\nuser: hi\nthere\n" and out.messages is None
    assert out.add_special_tokens is False  # vLLM's default for the chat form
    cont = _as_input(ChatRequests(Recording(), None, TEXT_MODEL), _request(continue_final_message=True))
    assert cont.input == "system: be brief\nuser: hi\nthere"
    explicit = _as_input(ChatRequests(Recording(), None, TEXT_MODEL), _request(add_special_tokens=True))
    assert explicit.add_special_tokens is True


def test_the_server_jinja_template_wins_over_the_tokenizer_one(jinja):
    tok = Recording(chat_template="{{ 'tokenizer template' }}")
    chat = ChatRequests(tok, jinja, TEXT_MODEL)
    out = _as_input(chat, _request(add_generation_prompt=True, chat_template_kwargs={"suffix": "!"}))
    assert out.input == "<system>be brief</system><user>hi\nthere</user><assistant>!"
    assert tok.calls[0]["chat_template"] == TEMPLATE and tok.calls[0]["tokenize"] is False


def test_the_tokenizer_template_without_a_server_template():
    tok = Recording(chat_template=TEMPLATE)
    out = _as_input(ChatRequests(tok, None, TEXT_MODEL), _request())
    assert out.input == "<system>be brief</system><user>hi\nthere</user>"


def test_a_template_error_is_a_400(jinja):
    tok = Recording(chat_template="{{ raise_exception('only user turns') }}")
    with pytest.raises(EmbeddingError, match="chat template failed: only user turns"):
        _as_input(ChatRequests(tok, None, TEXT_MODEL), _request())


@pytest.mark.parametrize(
    "body, match",
    [
        ({"input": "x"}, "either `input` or `messages`"),
        ({"messages": []}, "cannot be empty"),
        ({"add_generation_prompt": True, "continue_final_message": True}, "cannot both be true"),
        ({"chat_template_kwargs": {"tokenize": True}}, "cannot set `tokenize`"),
        ({"modality": "image"}, "`modality` does not apply"),
        ({"add_generation_prompt": True}, "needs a chat template"),  # no template on this model
        ({"chat_template_kwargs": {"x": 1}}, "needs a chat template"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}]},
            "does not take image inputs",
        ),
    ],
)
def test_refusals_on_a_text_model(body, match):
    with pytest.raises(EmbeddingError, match=match) as e:
        _as_input(ChatRequests(Recording(), None, TEXT_MODEL), _request(**body))
    assert e.value.kind.name == "INVALID_REQUEST"


def test_image_models_take_one_user_message_as_one_item():
    chat = ChatRequests(Recording(), None, IMAGE_MODEL)
    parts = [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "high"}},
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b"},
    ]
    out = _as_input(chat, _request(messages=[{"role": "user", "content": parts}]))
    assert out.input == [MultimodalEmbeddingInput(text="a\nb", image="data:image/png;base64,AAAA")]
    assert out.add_special_tokens is True  # the item path's own default, which items require
    text = _as_input(chat, _request(messages=[{"role": "user", "content": "just text"}]))
    assert text.input == [MultimodalEmbeddingInput(text="just text")]


@pytest.mark.parametrize(
    "body, match",
    [
        ({}, "one user message per request"),  # system + user
        ({"messages": [{"role": "assistant", "content": "x"}]}, "one user message"),
        ({"messages": [{"role": "user", "content": None}]}, "no content"),
        ({"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": True}, "fixed template"),
        ({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"a": 1}}, "fixed template"),
    ],
)
def test_refusals_on_an_image_model(body, match):
    with pytest.raises(EmbeddingError, match=match):
        _as_input(ChatRequests(Recording(), None, IMAGE_MODEL), _request(**body))
    two = [{"type": "image_url", "image_url": {"url": "a"}}, {"type": "image_url", "image_url": {"url": "b"}}]
    with pytest.raises(EmbeddingError, match="2 images"):
        _as_input(ChatRequests(Recording(), None, IMAGE_MODEL), _request(messages=[{"role": "user", "content": two}]))


def test_a_fixed_layout_server_template_takes_the_item_path():
    chat = ChatRequests(Recording(chat_template=TEMPLATE), load_chat_template("gme-qwen2-vl"), TEXT_MODEL)
    out = _as_input(chat, _request(messages=[{"role": "user", "content": "x"}]))
    assert out.input == [MultimodalEmbeddingInput(text="x")]


def test_protocol_refuses_unknown_content_parts_and_missing_input_is_named():
    with pytest.raises(ValidationError):
        _request(messages=[{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}])
    info = make_model_info()
    with pytest.raises(EmbeddingError, match="'input' is required") as e:
        embedding_request_input(EmbeddingRequest.model_validate({}), info, "m")
    assert e.value.param == "input"
