"""Chat-template rendering under random templates and messages (issue 15): a bounded hypothesis search
over templates assembled from Jinja fragments (tags, loops, filters, tests, arithmetic, raise_exception,
undefined names, unbalanced blocks) and over hostile message contents. Every render must return a str or
raise ValueError naming the template problem; nothing else may escape (the templates come from model
folders). Loops use small ranges only: the sandbox bounds a range to 100000 items but not nested loops, so
a template can still take long (as in transformers); that is documented, not fuzzed."""
from __future__ import annotations

import pytest

pytest.importorskip("jinja2")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st

from torchburn.llm.chat_template import render_chat

FRAGMENTS = [
    "{{ bos_token }}", "{{ eos_token }}", "{% for m in messages %}", "{% endfor %}", "{% if add_generation_prompt %}",
    "{% endif %}", "{% else %}", "{{ m['role'] }}", "{{ m.content }}", "{{ m['content'] | trim }}",
    "{{ messages | length }}", "{{ messages[0]['content'][:5] }}", "{{ messages[-1].role | upper }}",
    "{{ raise_exception('bad role') }}", "{{ undefined_name }}", "{{ undefined_name.attr }}", "{{ 1 / 0 }}",
    "{{ 10 // 0 }}", "{{ 'a' * 3 }}", "{{ 'x' + 1 }}", "{{ m | tojson }}", "{{ messages | tojson(indent=2) }}",
    "{% set ns = namespace(n=0) %}", "{% set ns.n = ns.n + 1 %}", "{{ ns.n }}", "{% for i in range(3) %}",
    "{% if loop.first %}", "{% break %}", "{% continue %}", "{{ loop.index0 }}", "{{ strftime_now('%Y') }}",
    "{{ messages.append(1) }}", "{{ ''.__class__ }}", "{{ m.items() | list }}", "{{ m['missing'] }}",
    "{{ (m['content'] | int) + 1 }}", "{{ '%d' % m['content'] }}", "{{ m['content'].split(' ')[9] }}",
    "{% macro f(x) %}{{ x }}{% endmacro %}", "{{ f(1) }}", "{{ caller() }}", "{% generation %}",
    "{% endgeneration %}", "{% macro r() %}{{ r() }}{% endmacro %}{{ r() }}", "{{ tools | length }}", "{{ documents[0] }}", "{% if m is string %}", "{{", "}}",
    "{%", "%}", "{#", "#}", "<|im_start|>", "\n", " ", "text",
]

CONTENT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
MESSAGES = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant", "tool", "x"]),
                                           "content": CONTENT}), min_size=1, max_size=4)


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(template=st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("".join), messages=MESSAGES,
       add_generation_prompt=st.booleans())
def test_random_templates_render_or_raise_value_error(template, messages, add_generation_prompt):
    try:
        out = render_chat(template, messages, add_generation_prompt=add_generation_prompt,
                          special_tokens={"bos_token": "<s>", "eos_token": "</s>"})
    except ValueError as error:
        assert "chat template" in str(error) or "messages" in str(error)
    else:
        assert isinstance(out, str)
