"""--log-request-text's view of a request: capped, images never logged, chat messages readable."""

from __future__ import annotations

from sglang.srt.frontend.http.http_server import loggable_input
from sglang.srt.frontend.openai.protocol import EmbeddingRequest


def test_text_inputs_are_capped():
    assert loggable_input("x" * 5000) == "x" * 2000
    assert loggable_input(["a"] * 100) == ["a"] * 64
    assert loggable_input([1, 2, 3]) == [1, 2, 3]  # token ids as they are


def test_image_items_log_no_image_data():
    req = EmbeddingRequest(input=[{"text": "cap", "image": "data:image/png;base64," + "A" * 1000}])
    assert loggable_input(req.input) == [{"text": "cap", "image": "<image>"}]


def test_chat_messages_log_role_text_and_image_count():
    req = EmbeddingRequest(
        messages=[
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 1000}},
                    {"type": "text", "text": "this " + "y" * 5000},
                ],
            },
        ]
    )
    logged = loggable_input(req.input, req.messages)
    assert logged[0] == {"role": "system", "text": "be brief", "images": 0}
    assert logged[1]["role"] == "user" and logged[1]["images"] == 1
    assert logged[1]["text"].startswith("what is this y") and len(logged[1]["text"]) == 2000
    assert "base64" not in str(logged)
