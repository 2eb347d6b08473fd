"""Chat templates rendered exactly as ``transformers``' ``apply_chat_template`` renders them: the model's
own Jinja template in an ``ImmutableSandboxedEnvironment`` with ``trim_blocks`` and ``lstrip_blocks``,
the ``loopcontrols`` extension, a ``tojson`` filter that does not escape HTML, the ``raise_exception``,
``strftime_now``, ``dict`` and ``namespace`` globals, the tokenizer's special tokens as variables, and
``add_generation_prompt=True`` by default.

Example::

    >>> from torchburn.llm.chat_template import render_chat
    >>> template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}\\n{% endfor %}"
    >>> render_chat(template, [{"role": "user", "content": "hi"}])
    '<user>hi\\n'
"""
from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any, Mapping, Optional, Sequence

__all__ = ["render_chat", "validate_messages"]

_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


@functools.lru_cache(maxsize=16)
def _compile(template: str):
    try:
        import jinja2
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as error:  # pragma: no cover - jinja2 is a dependency of the llm extra
        raise ImportError("chat templates need jinja2: pip install 'torchburn[llm]' (or pip install jinja2)") from error

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    class TemplateDict:
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"chat templates cannot store underscore-prefixed attributes on a namespace, got {name!r}"
                )

    class GenerationTag(jinja2.ext.Extension):
        """Accepts ``{% generation %}...{% endgeneration %}`` blocks (rendered as their body)."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env.from_string(template)


def _plain(value: Any) -> Any:
    """Plain JSON-like copies of what the template sees (no caller objects inside the sandbox)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return repr(value)


def validate_messages(messages: Any) -> list[dict]:
    """Checks a chat: a non-empty list of dicts with a str ``role`` and a str (or list of content parts)
    ``content``. Raises ``ValueError`` naming the first bad message."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ValueError(f"messages must be a list of {{'role': ..., 'content': ...}} dicts, not {type(messages).__name__}")
    if len(messages) == 0:
        raise ValueError("messages is empty")
    checked = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValueError(f"messages[{index}] must be a dict with 'role' and 'content', not {type(message).__name__}")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise ValueError(f"messages[{index}]['role'] must be a non-empty str, got {role!r}")
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise ValueError(
                f"messages[{index}]['content'] must be a str (or a list of content parts), not {type(content).__name__}"
            )
        checked.append(dict(message))
    return checked


def _alias_reasoning(chat: list[dict]) -> list[dict]:
    out = []
    for message in chat:
        reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(message)
    return out


def render_chat(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    add_generation_prompt: bool = True,
    special_tokens: Optional[Mapping[str, str]] = None,
    tools: Optional[list] = None,
    documents: Optional[list] = None,
    **kwargs: Any,
) -> str:
    """Renders ``messages`` with ``template`` like ``tokenizer.apply_chat_template(messages,
    tokenize=False, add_generation_prompt=...)``. ``special_tokens`` maps ``bos_token``, ``eos_token``,
    ... to their strings (transformers passes the tokenizer's special tokens map). Template errors
    (including ``raise_exception``) and Python errors inside the template's expressions raise ``ValueError``."""
    import jinja2

    chat = _alias_reasoning(_plain(validate_messages(messages)))
    variables = dict(_plain(dict(special_tokens or {})))
    variables.update(_plain(kwargs))
    try:
        return _compile(template).render(
            messages=chat,
            tools=_plain(tools),
            documents=_plain(documents),
            add_generation_prompt=add_generation_prompt,
            **variables,
        )
    except jinja2.exceptions.TemplateError as error:
        raise ValueError(f"chat template error: {error}") from error
    except (ArithmeticError, TypeError, AttributeError, LookupError, ValueError, SyntaxError, RecursionError) as error:
        # Python errors raised by the template's own expressions ('x' + 1, 1 / 0, a loop control outside a
        # loop, unbounded macro recursion): the template is broken, not the caller's arguments
        raise ValueError(f"chat template error: {type(error).__name__}: {error}") from error
