"""Request validation for the OpenAI-compatible endpoints: each body field is checked for type and range
and turned into :class:`~torchburn.llm.engine.GenerationParams`; anything wrong raises :class:`ApiError`
with the HTTP status and OpenAI's error JSON (``{"error": {"message", "type", "param", "code"}}``)."""
from __future__ import annotations

import math
import re
from typing import Any, Optional

from .engine import GenerationParams

__all__ = ["ApiError", "parse_generation", "chat_messages", "completion_prompt", "error_body"]


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: Optional[str] = None, code: Optional[str] = None,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind


def error_body(status: int, message: str, param: Optional[str] = None, code: Optional[str] = None,
               kind: Optional[str] = None) -> dict:
    if kind is None:
        kind = {401: "authentication_error", 404: "invalid_request_error", 413: "invalid_request_error",
                429: "rate_limit_error"}.get(status, "invalid_request_error" if status < 500 else "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _number(body: dict, name: str, default: float, low: float, high: float) -> float:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ApiError(400, f"'{name}' must be a number, got {type(value).__name__}", name, "invalid_type")
    value = float(value)
    if not math.isfinite(value) or not (low <= value <= high):
        raise ApiError(400, f"'{name}' must be a finite number in [{low:g}, {high:g}], got {value!r}", name,
                       "invalid_value")
    return value


def _integer(body: dict, name: str) -> Optional[int]:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"'{name}' must be an integer, got {type(value).__name__}", name, "invalid_type")
    return value


def _boolean(body: dict, name: str, default: bool = False) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError(400, f"'{name}' must be a boolean, got {type(value).__name__}", name, "invalid_type")
    return value


def parse_generation(body: dict, prompt_tokens: int, ctx_size: int, chat: bool) -> tuple[GenerationParams, bool]:
    """(params, stream) from a request body whose prompt has `prompt_tokens` tokens."""
    n = _integer(body, "n")
    if n is not None and n != 1:
        raise ApiError(400, f"'n' must be 1 (one choice per request), got {n}", "n", "invalid_value")
    max_tokens = _integer(body, "max_completion_tokens")
    name = "max_completion_tokens"
    if max_tokens is None:
        max_tokens, name = _integer(body, "max_tokens"), "max_tokens"
    room = ctx_size - prompt_tokens
    if prompt_tokens > ctx_size:
        raise ApiError(400, f"This model's maximum context length is {ctx_size} tokens. However, your prompt has "
                       f"{prompt_tokens} tokens.", "messages" if chat else "prompt", "context_length_exceeded")
    if max_tokens is None:
        max_tokens = max(room, 1)
    elif max_tokens < 1:
        raise ApiError(400, f"'{name}' must be at least 1, got {max_tokens}", name, "invalid_value")
    elif max_tokens > room:
        raise ApiError(400, f"This model's maximum context length is {ctx_size} tokens. However, you requested "
                       f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the "
                       f"{'messages' if chat else 'prompt'}, {max_tokens} in the completion).", name,
                       "context_length_exceeded")
    stop = body.get("stop")
    if stop is None:
        stops: list[str] = []
    elif isinstance(stop, str):
        stops = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= 4:
        stops = list(stop)
    else:
        raise ApiError(400, "'stop' must be a string or a list of at most 4 strings", "stop", "invalid_type")
    if any(not s for s in stops):
        raise ApiError(400, "'stop' strings must not be empty", "stop", "invalid_value")
    seed = _integer(body, "seed")
    if seed is not None and not (-(2**63) <= seed < 2**64):
        raise ApiError(400, "'seed' must fit in 64 bits", "seed", "invalid_value")
    if chat:
        want = _boolean(body, "logprobs")
        top = _integer(body, "top_logprobs")
        if top is not None and not (0 <= top <= 20):
            raise ApiError(400, f"'top_logprobs' must be in [0, 20], got {top}", "top_logprobs", "invalid_value")
        if top is not None and not want:
            raise ApiError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs", "invalid_value")
        logprobs = (top or 0) if want else -1
    else:
        top = _integer(body, "logprobs")
        if top is not None and not (0 <= top <= 5):
            raise ApiError(400, f"'logprobs' must be in [0, 5], got {top}", "logprobs", "invalid_value")
        logprobs = -1 if top is None else top
    json_output = _response_format(body.get("response_format"))
    if chat and json_output == "json_object" and not _mentions_json(body.get("messages")):
        raise ApiError(400, "'messages' must contain the word 'json' in some form, to use 'response_format' of "
                       "type 'json_object'.", "messages", "invalid_value")
    stream = _boolean(body, "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError(400, "'stream_options' must be an object", "stream_options", "invalid_type")
    params = GenerationParams(
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0) or 1.0,
        seed=None if seed is None else seed & (2**64 - 1),
        presence_penalty=_number(body, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=_number(body, "frequency_penalty", 0.0, -2.0, 2.0),
        stop=stops,
        logprobs=logprobs,
        json=json_output is not None,
    )
    return params, stream


_SCHEMA_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_SCHEMA_DEPTH = 32
MAX_SCHEMA_NODES = 10_000


def _check_schema(schema: Any) -> None:
    """A JSON schema must be an object of bounded size and depth whose root describes an object. Walked
    without recursion, so a hostile schema costs at most MAX_SCHEMA_NODES steps."""
    param = "response_format.json_schema.schema"
    if not isinstance(schema, dict):
        raise ApiError(400, "'response_format.json_schema.schema' must be an object", param, "invalid_type")
    root_type = schema.get("type", "object")
    if root_type != "object" and not (isinstance(root_type, list) and "object" in root_type):
        raise ApiError(400, f"the schema's root must be of type 'object' (the output is one JSON object), got "
                       f"{str(root_type)[:40]!r}", param, "invalid_value")
    stack, nodes = [(schema, 1)], 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > MAX_SCHEMA_NODES:
            raise ApiError(400, f"the schema has more than {MAX_SCHEMA_NODES} values", param, "invalid_value")
        if depth > MAX_SCHEMA_DEPTH:
            raise ApiError(400, f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels", param, "invalid_value")
        if isinstance(value, dict):
            if not all(isinstance(k, str) for k in value):
                raise ApiError(400, "schema keys must be strings", param, "invalid_type")
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def _mentions_json(messages: Any) -> bool:
    """OpenAI's rule for JSON mode: some message must ask for JSON (the word, in any case), since a model
    told nothing about the format may fill max_tokens with whitespace inside the constraint."""
    for i, message in enumerate(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and "json" in _content_text(message.get("content") or "", i).lower():
            return True
    return False


def _response_format(value: Any) -> Optional[str]:
    """The JSON kind the output must be, or None for free text: {"type": "json_object"} (one JSON object;
    chat messages must mention JSON), or {"type": "json_schema", "json_schema": {"name", "schema", "strict",
    "description"}} (the schema is checked for shape and size; the engine guarantees a valid JSON object,
    not conformance to the schema). {"type": "text"} or absent: free text."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ApiError(400, "'response_format' must be an object", "response_format", "invalid_type")
    kind = value.get("type")
    unknown = sorted(set(value) - {"type", "json_schema"})
    if unknown:
        raise ApiError(400, f"unknown field(s) in 'response_format': {', '.join(map(str, unknown))[:200]}",
                       "response_format", "invalid_value")
    if kind == "text" or kind == "json_object":
        if "json_schema" in value:
            raise ApiError(400, f"'json_schema' is only valid with type 'json_schema', not {kind!r}",
                           "response_format", "invalid_value")
        return "json_object" if kind == "json_object" else None
    if kind != "json_schema":
        raise ApiError(400, f"'response_format.type' must be 'text', 'json_object' or 'json_schema', got "
                       f"{str(kind)[:40]!r}", "response_format.type", "invalid_value")
    spec = value.get("json_schema")
    if not isinstance(spec, dict):
        raise ApiError(400, "'response_format.json_schema' must be an object", "response_format.json_schema",
                       "invalid_type")
    unknown = sorted(set(spec) - {"name", "schema", "strict", "description"})
    if unknown:
        raise ApiError(400, f"unknown field(s) in 'response_format.json_schema': {', '.join(map(str, unknown))[:200]}",
                       "response_format.json_schema", "invalid_value")
    name = spec.get("name")
    if not isinstance(name, str) or not _SCHEMA_NAME.fullmatch(name):
        raise ApiError(400, "'response_format.json_schema.name' must be 1 to 64 letters, digits, '_' or '-'",
                       "response_format.json_schema.name", "invalid_value")
    if not isinstance(spec.get("strict", False), (bool, type(None))):
        raise ApiError(400, "'response_format.json_schema.strict' must be a boolean",
                       "response_format.json_schema.strict", "invalid_type")
    if not isinstance(spec.get("description", ""), (str, type(None))):
        raise ApiError(400, "'response_format.json_schema.description' must be a string",
                       "response_format.json_schema.description", "invalid_type")
    if spec.get("schema") is not None:
        _check_schema(spec["schema"])
    return "json_schema"


def _content_text(content: Any, index: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(400, f"messages[{index}].content parts must be {{'type': 'text', 'text': str}} "
                               "(only text is supported)", "messages", "invalid_type")
            parts.append(part["text"])
        return "".join(parts)
    if content is None:
        return ""
    raise ApiError(400, f"messages[{index}].content must be a string or a list of text parts", "messages",
                   "invalid_type")


def chat_messages(body: dict) -> list[dict]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list", "messages", "invalid_type")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError(400, f"messages[{i}] must be an object with a string 'role'", "messages", "invalid_type")
        if message["role"] not in ("system", "user", "assistant", "developer", "tool"):
            raise ApiError(400, f"messages[{i}].role {message['role']!r} is not one of system, user, assistant, "
                           "developer, tool", "messages", "invalid_value")
        role = "system" if message["role"] == "developer" else message["role"]
        out.append({"role": role, "content": _content_text(message.get("content"), i)})
    return out


def completion_prompt(body: dict) -> Any:
    """A str, or a list of token ids."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise ApiError(400, "'prompt' is empty", "prompt", "invalid_value")
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return prompt
    raise ApiError(400, "'prompt' must be a non-empty string, one string in a list, or a list of token ids",
                   "prompt", "invalid_type")
