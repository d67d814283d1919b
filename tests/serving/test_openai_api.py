"""OpenAI request validation, error bodies, response shapes and tenants (no Ray, no model)."""

from __future__ import annotations

import json

import pytest

from ray_kvmoq.serving.openai_api import (
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatDelta,
    CompletionRequest,
    OpenAIError,
    TenantTable,
    Usage,
    parse_request,
    sse,
)


def _error(model: type, body: object) -> OpenAIError:
    with pytest.raises(OpenAIError) as ei:
        parse_request(model, body)
    return ei.value


def test_completion_defaults_and_single_prompt_list() -> None:
    req = parse_request(CompletionRequest, {"model": "m", "prompt": ["hello"]})
    assert req.prompt == "hello" and req.max_tokens == 16 and req.temperature == 1.0
    ids = parse_request(CompletionRequest, {"model": "m", "prompt": [1, 2, 3]})
    assert ids.prompt == [1, 2, 3]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "x"}, "model"),
        ({"model": "m"}, "prompt"),
        ({"model": "m", "prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"model": "m", "prompt": "x", "temperature": 3}, "temperature"),
        ({"model": "m", "prompt": "x", "n": 2}, "n"),
        ({"model": "m", "prompt": ["a", "b"]}, "prompt"),
        ({"model": "m", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ],
)
def test_completion_rejects_with_openai_error(body: dict[str, object], param: str) -> None:
    err = _error(CompletionRequest, body)
    assert err.status == 400
    out = err.body()["error"]
    assert set(out) == {"message", "type", "param", "code"}
    assert out["type"] == "invalid_request_error"
    assert out["param"] == param
    json.dumps(err.body())


def test_body_must_be_an_object() -> None:
    err = _error(CompletionRequest, ["not", "an", "object"])
    assert err.status == 400 and err.code == "invalid_json"


def test_missing_field_code() -> None:
    assert _error(ChatCompletionRequest, {"model": "m"}).code == "missing_required_parameter"


def test_chat_messages_and_limits() -> None:
    req = parse_request(
        ChatCompletionRequest,
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "be brief"},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}],
                },
            ],
            "max_completion_tokens": 7,
            "stream": True,
            "stream_options": {"include_usage": True},
            "unknown_future_field": 1,
        },
    )
    assert req.messages[1].text() == "hi there"
    assert req.token_limit(100) == 7 and req.include_usage()
    assert _error(ChatCompletionRequest, {"model": "m", "messages": []}).param == "messages"
    bad_role = {"model": "m", "messages": [{"role": "wizard", "content": "x"}]}
    assert _error(ChatCompletionRequest, bad_role).param == "messages.role"


def test_usage_reports_cached_tokens() -> None:
    u = Usage.of(300, 5, 256)
    assert u.total_tokens == 305 and u.prompt_tokens_details.cached_tokens == 256


def test_sse_lines() -> None:
    chunk = ChatCompletionChunk(
        id="c", created=1, model="m", choices=[ChatChunkChoice(delta=ChatDelta(content="hi"))]
    )
    line = sse(chunk)
    assert line.startswith("data: {") and line.endswith("\n\n")
    assert json.loads(line[6:])["choices"][0]["delta"]["content"] == "hi"
    assert sse("[DONE]") == "data: [DONE]\n\n"


def test_tenants_without_keys_are_public() -> None:
    t = TenantTable()
    assert not t.auth_required
    assert t.resolve(None).name == "public" == t.resolve("Bearer anything").name


def test_tenants_by_key_and_salts_apart() -> None:
    t = TenantTable({"k1": "alice", "k2": "bob", "k3": "alice"}, secret="s")
    a, b = t.resolve("Bearer k1"), t.resolve("bearer k2")
    assert a.name == "alice" and b.name == "bob" and a.salt != b.salt
    assert t.resolve("Bearer k3").salt == a.salt  # two keys of one tenant share its cache
    assert TenantTable({"k1": "alice"}, secret="other").resolve("Bearer k1").salt != a.salt
    assert a.with_cache_salt("x").salt != a.salt and a.with_cache_salt(None) is a
    for header in (None, "Bearer nope", "Basic k1"):
        with pytest.raises(OpenAIError) as ei:
            t.resolve(header)
        assert ei.value.status == 401 and ei.value.code == "invalid_api_key"
