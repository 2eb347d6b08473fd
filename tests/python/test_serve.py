"""torchburn-llm serve through the official `openai` client on loopback, against a tiny random Qwen2 built
here: chat, completions, streaming, stop strings, seeds, API keys, /v1/models, /health while loading,
/metrics; 16 concurrent greedy streams equal the same requests one at a time and LLM.generate_tokens;
disconnects free slots; prefix reuse is counted, also after the prefix's slot served another prompt (the
shared KV block pool); a full KV pool fails one request with a 503 while the other finishes; malformed
requests get 4xx; memory stays flat."""
from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from torchburn.llm import LLM
from torchburn.llm.serve import create_app, serve_in_thread

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
MODEL_ID = "tiny-qwen2"
CTX = 384


def _tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["The quick brown fox jumps over the lazy dog. " * 3,
                             "Once upon a time in distributed systems, consensus was hard to reach."] * 20, trainer)
    return tok


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve_model") / "qwen2"
    torch.manual_seed(77)
    config = transformers.Qwen2Config(vocab_size=400, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                                      tie_word_embeddings=True, eos_token_id=2, bos_token_id=0)
    transformers.Qwen2ForCausalLM(config).eval().save_pretrained(folder)
    _tokenizer().save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML, "eos_token": "<|im_end|>"}))
    return folder


@pytest.fixture(scope="module")
def llm(model_dir, tmp_path_factory):
    import os

    os.environ.setdefault("TORCHBURN_CACHE_DIR", str(tmp_path_factory.mktemp("tbcache")))
    return LLM.from_pretrained(model_dir, quant="int4", quiet=True, max_seq_len=CTX)


@pytest.fixture(scope="module")
def server(llm):
    """(base_url, app state); /health is 503 until the gate opens."""
    gate = threading.Event()

    def load():
        gate.wait(30)
        return llm

    app = create_app(load, MODEL_ID, parallel=8, ctx_size=CTX, prefill_chunk=32)
    srv, port, thread = serve_in_thread(app)
    base = f"http://127.0.0.1:{port}"
    assert httpx.get(base + "/health").status_code == 503
    assert httpx.post(base + "/v1/completions", json={"prompt": "x"}).status_code == 503
    gate.set()
    deadline = time.monotonic() + 30
    while httpx.get(base + "/health").status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.02)
    yield base, app.state.torchburn
    srv.should_exit = True
    thread.join(10)


@pytest.fixture()
def client(server):
    return openai.OpenAI(base_url=server[0] + "/v1", api_key="none", max_retries=0, timeout=60)


def _engine_stats(server):
    return server[1].engine.stats


def test_health_and_models(server, client):
    assert httpx.get(server[0] + "/health").json()["status"] == "ok"
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL_ID]


def test_chat_usage_and_template(server, client, llm):
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "The quick fox?"}]
    out = client.chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=12, temperature=0)
    choice = out.choices[0]
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert out.usage.prompt_tokens == len(llm.encode_prompt(messages))
    assert 1 <= out.usage.completion_tokens <= 12
    assert out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens
    assert choice.finish_reason in ("stop", "length")
    if choice.finish_reason == "length":
        assert out.usage.completion_tokens == 12


def test_greedy_equals_llm_generate_tokens(client, llm):
    """Prompts shorter than the prefill chunk: the server's tokens are LLM.generate_tokens' on a fresh cache."""
    ids = torch.randint(10, 390, (20,), generator=torch.Generator().manual_seed(3)).tolist()
    out = client.completions.create(model=MODEL_ID, prompt=ids, max_tokens=24, temperature=0, logprobs=0)
    llm.reset()
    expected = llm.generate_tokens(ids, max_tokens=24, temperature=0.0)
    expected_text = llm.tokenizer.decode([t for t in expected if t not in llm.stop_token_ids], skip_special_tokens=True)
    assert out.choices[0].text == expected_text
    assert out.usage.completion_tokens == len(expected)


def test_stream_equals_non_stream(client):
    kwargs = dict(model=MODEL_ID, prompt="Once upon a time", max_tokens=20, temperature=0)
    whole = client.completions.create(**kwargs)
    pieces = list(client.completions.create(stream=True, **kwargs))
    assert "".join(p.choices[0].text for p in pieces) == whole.choices[0].text
    assert pieces[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    messages = [{"role": "user", "content": "hello"}]
    chat = client.chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=16, temperature=0)
    stream = list(client.chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=16, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert stream[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == chat.choices[0].message.content
    assert stream[-1].usage.completion_tokens == chat.usage.completion_tokens


def test_sse_ends_with_done(server):
    with httpx.stream("POST", server[0] + "/v1/chat/completions", json={
            "model": MODEL_ID, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": True}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]" and all(line.startswith("data: ") for line in lines)


def test_stop_string(client):
    kwargs = dict(model=MODEL_ID, prompt="The lazy dog", max_tokens=40, temperature=0)
    full = client.completions.create(**kwargs).choices[0].text
    assert len(full) > 6
    stop = full[len(full) // 2: len(full) // 2 + 2]
    cut = client.completions.create(stop=[stop], **kwargs).choices[0]
    assert cut.text == full[: full.index(stop)] and cut.finish_reason == "stop"
    streamed = list(client.completions.create(stop=stop, stream=True, **kwargs))
    assert "".join(p.choices[0].text for p in streamed) == cut.text


def test_seed_reproducible(client):
    kwargs = dict(model=MODEL_ID, messages=[{"role": "user", "content": "tell"}], max_tokens=24, temperature=1.0,
                  top_p=0.95)
    a = client.chat.completions.create(seed=1234, **kwargs).choices[0].message.content
    b = client.chat.completions.create(seed=1234, **kwargs).choices[0].message.content
    assert a == b
    penalized = client.chat.completions.create(seed=1234, presence_penalty=1.5, frequency_penalty=1.0, **kwargs)
    assert isinstance(penalized.choices[0].message.content, str)


def test_logprobs(client):
    out = client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "x"}], max_tokens=6,
                                         temperature=0, logprobs=True, top_logprobs=3)
    content = out.choices[0].logprobs.content
    assert len(content) >= 1
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[-1].logprob
        assert abs(entry.logprob - entry.top_logprobs[0].logprob) < 1e-5  # greedy takes the top token


def _json_requests(formats, seeds, max_tokens, base, temperature=1.0):
    """Chat and completion requests with each response_format, concurrently: [(finish_reason, text)]."""
    messages = [{"role": "user", "content": "Reply in JSON: the quick brown fox?"}]

    async def one(client, i, seed):
        kwargs = dict(model=MODEL_ID, max_tokens=max_tokens, temperature=temperature, seed=seed,
                      response_format=formats[i % len(formats)])
        if i % 3 == 0:  # streamed chat
            stream = await client.chat.completions.create(messages=messages, stream=True, **kwargs)
            chunks = [chunk async for chunk in stream]
            return (chunks[-1].choices[0].finish_reason, "".join(c.choices[0].delta.content or "" for c in chunks))
        if i % 3 == 1:
            out = await client.chat.completions.create(messages=messages, **kwargs)
            return out.choices[0].finish_reason, out.choices[0].message.content
        kwargs["extra_body"] = {"response_format": kwargs.pop("response_format")}  # not in the client's signature
        out = await client.completions.create(prompt="Once upon a time", **kwargs)
        return out.choices[0].finish_reason, out.choices[0].text

    async def run_all():
        async with openai.AsyncOpenAI(base_url=base, api_key="none", max_retries=0, timeout=120) as client:
            return await asyncio.gather(*(one(client, i, seed) for i, seed in enumerate(seeds)))

    return asyncio.run(run_all())


JSON_FORMATS = [{"type": "json_object"},
                {"type": "json_schema", "json_schema": {"name": "answer", "strict": True, "schema": {
                    "type": "object", "properties": {"a": {"type": "string"}}}}}]


def test_response_format_json_parses(server):
    """Seeded sampling under the JSON constraint (chat, streamed chat, completions): every output that
    ended with "stop" parses with json.loads as an object, and every output starts an object; those cut by
    max_tokens end with "length". Without the constraint the same requests give no JSON."""
    results = _json_requests(JSON_FORMATS, range(48), 40, server[0] + "/v1")
    finished = [text for reason, text in results if reason == "stop"]
    assert len(finished) >= 8, results  # the random model closes many objects within 40 tokens
    for text in finished:
        assert isinstance(json.loads(text), dict), text
    for reason, text in results:
        assert reason in ("stop", "length") and text.lstrip().startswith("{"), (reason, text)
    free = _json_requests([{"type": "text"}], range(6), 40, server[0] + "/v1")
    assert not any(text.lstrip().startswith("{") for _, text in free)


def test_response_format_json_greedy_and_reproducible(server):
    """Greedy JSON takes the best valid token: the same text every time, alone or beside other requests."""
    base = server[0] + "/v1"
    alone = _json_requests(JSON_FORMATS[:1], [0], 60, base, temperature=0.0)
    together = _json_requests(JSON_FORMATS[:1], range(8), 60, base, temperature=0.0)
    assert all(r == alone[0] for r in together[::3])  # the streamed-chat requests, same prompt
    reason, text = alone[0]
    if reason == "stop":
        assert isinstance(json.loads(text), dict)
    assert text.lstrip().startswith("{")
    seeded = _json_requests(JSON_FORMATS, [5, 5, 5], 40, base)
    assert _json_requests(JSON_FORMATS, [5, 5, 5], 40, base) == seeded


def test_response_format_hostile_input_rejected(server):
    url = server[0] + "/v1/chat/completions"
    messages = [{"role": "user", "content": "hi"}]

    def schema(value):
        return {"type": "json_schema", "json_schema": {"name": "s", "schema": value}}

    deep: dict = {"type": "object"}
    for _ in range(40):
        deep = {"type": "object", "properties": {"x": deep}}
    bad = [
        "json_object", {"type": "yaml"}, {"type": ["json_object"]}, {"type": "json_object", "extra": 1},
        {"type": "json_object", "json_schema": {"name": "s"}}, {"type": "json_schema"},
        {"type": "json_schema", "json_schema": "s"}, {"type": "json_schema", "json_schema": {"schema": {}}},
        {"type": "json_schema", "json_schema": {"name": "bad name!", "schema": {}}},
        {"type": "json_schema", "json_schema": {"name": "n" * 65}},
        {"type": "json_schema", "json_schema": {"name": "s", "strict": "yes"}},
        {"type": "json_schema", "json_schema": {"name": "s", "unknown": 1}},
        schema([]), schema("object"), schema({"type": "array"}), schema({"type": ["string"]}), schema(deep),
        schema({"type": "object", "enum": list(range(20000))}),
    ]
    for response_format in bad:
        r = httpx.post(url, json={"model": MODEL_ID, "messages": messages, "response_format": response_format})
        assert r.status_code == 400, (response_format if len(str(response_format)) < 300 else "big", r.text)
        assert r.json()["error"]["param"].startswith("response_format")
    # a body nested past Python's recursion limit is a 400, not a 500
    nested = '{"model": "%s", "messages": [], "response_format": %s}' % (MODEL_ID, "[" * 100000 + "]" * 100000)
    r = httpx.post(url, content=nested, headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    assert httpx.get(server[0] + "/health").status_code == 200
    ok = httpx.post(url, json={"model": MODEL_ID, "messages": messages, "max_tokens": 4,
                               "response_format": schema({"type": "object"})})
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"].lstrip().startswith("{")
    # OpenAI's JSON-mode rule: some message must ask for JSON (json_schema has no such rule)
    r = httpx.post(url, json={"model": MODEL_ID, "messages": messages, "response_format": {"type": "json_object"}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages", r.text
    assert "'json'" in r.json()["error"]["message"]
    asked = [{"role": "system", "content": [{"type": "text", "text": "Answer in Json."}]}] + messages
    ok = httpx.post(url, json={"model": MODEL_ID, "messages": asked, "max_tokens": 4,
                               "response_format": {"type": "json_object"}})
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"].lstrip().startswith("{")


def test_api_key(llm):
    app = create_app(lambda: llm, MODEL_ID, api_key="sekrit", parallel=2, ctx_size=CTX)
    srv, port, thread = serve_in_thread(app)
    try:
        deadline = time.monotonic() + 30
        while httpx.get(f"http://127.0.0.1:{port}/health").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        bad = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as info:
            bad.models.list()
        assert info.value.status_code == 401 and "API key" in str(info.value)
        good = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sekrit", max_retries=0)
        assert good.completions.create(model=MODEL_ID, prompt="hi", max_tokens=2).usage.completion_tokens >= 1
    finally:
        srv.should_exit = True
        thread.join(10)


def test_concurrent_streams_equal_sequential(server, llm):
    base = server[0] + "/v1"
    prompts = [f"Request {i}: " + "the quick brown fox " * (1 + i % 5) for i in range(16)]

    async def one(client, prompt):
        stream = await client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=24, temperature=0,
                                                 stream=True)
        return "".join([chunk.choices[0].text async for chunk in stream])

    async def run_all(concurrent):
        async with openai.AsyncOpenAI(base_url=base, api_key="none", max_retries=0, timeout=120) as client:
            if concurrent:
                return await asyncio.gather(*(one(client, p) for p in prompts))
            return [await one(client, p) for p in prompts]

    sequential = asyncio.run(run_all(False))
    before = _engine_stats(server)
    together = asyncio.run(run_all(True))
    after = _engine_stats(server)
    assert together == sequential
    steps = after["decode_steps"] - before["decode_steps"]
    rows = after["decode_rows"] - before["decode_rows"]
    assert rows > 2 * steps > 0  # the concurrent run really batched sequences into decode steps


def test_batch_tokens_budget_same_tokens(server, llm):
    """--batch-tokens packs several prompt chunks into one engine step; the tokens and their logprobs stay
    those of the one-chunk-per-step server (the module's), run one request at a time."""
    prompts = [f"Budget {i}: " + "once upon a time in distributed systems " * (3 + i % 4) for i in range(8)]

    async def one(client, prompt):
        stream = await client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=12, temperature=0,
                                                 stream=True, logprobs=0)
        chunks = [chunk.choices[0] async for chunk in stream]  # logprobs: equal bits, not just equal argmax
        return "".join(c.text for c in chunks), [p for c in chunks for p in c.logprobs.token_logprobs]

    async def run_all(base, concurrent):
        async with openai.AsyncOpenAI(base_url=base, api_key="none", max_retries=0, timeout=120) as client:
            if concurrent:
                return await asyncio.gather(*(one(client, p) for p in prompts))
            return [await one(client, p) for p in prompts]

    sequential = asyncio.run(run_all(server[0] + "/v1", False))
    app = create_app(lambda: llm, MODEL_ID, parallel=8, ctx_size=CTX, prefill_chunk=32, batch_tokens=128)
    srv, port, thread = serve_in_thread(app)
    try:
        _wait_healthy(f"http://127.0.0.1:{port}")
        together = asyncio.run(run_all(f"http://127.0.0.1:{port}/v1", True))
        stats = app.state.torchburn.engine.engine.stats
    finally:
        srv.should_exit = True
        thread.join(10)
    assert together == sequential
    assert stats["batch_tokens"] == 128
    assert stats["prefill_chunks"] > stats["prefill_steps"] > 0  # steps really ran several chunks


def test_disconnect_frees_slot(llm):
    """A client that goes away mid-stream (and one that never reads a non-streamed answer) cancels its
    request: the slot frees long before the 20,000 tokens it asked for."""
    app = create_app(lambda: llm, MODEL_ID, parallel=2, ctx_size=24000)
    srv, port, thread = serve_in_thread(app)
    state = app.state.torchburn
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while httpx.get(base + "/health").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        body = {"model": MODEL_ID, "prompt": "Once", "max_tokens": 20000, "temperature": 0}
        with httpx.stream("POST", base + "/v1/completions", json=dict(body, stream=True)) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    break
        with pytest.raises(httpx.TimeoutException):
            httpx.post(base + "/v1/completions", json=body, timeout=0.3)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            stats = state.engine.stats
            if stats["active"] == 0 and stats["requests_cancelled"] >= 2:
                break
            time.sleep(0.02)
        stats = state.engine.stats
        assert stats["active"] == 0 and stats["requests_cancelled"] == 2, stats
        assert stats["generated_tokens"] < 2 * 20000
        assert httpx.post(base + "/v1/completions", json=dict(body, max_tokens=3)).status_code == 200
    finally:
        srv.should_exit = True
        thread.join(10)


def test_prefix_reuse_counted(server, client):
    system = "You are a careful assistant. " + "Answer with the quick brown fox facts only. " * 8
    before = _engine_stats(server)
    outs = [client.chat.completions.create(model=MODEL_ID, max_tokens=4, temperature=0, messages=[
        {"role": "system", "content": system}, {"role": "user", "content": question}]) for question in ("a?", "b?")]
    after = _engine_stats(server)
    assert after["prefix_hits"] > before["prefix_hits"]
    cached = outs[1].usage.prompt_tokens_details.cached_tokens
    assert cached >= 32 and cached % 32 == 0
    metrics = httpx.get(server[0] + "/metrics").text
    assert "torchburn_prefix_cache_hits_total" in metrics and "torchburn_kv_cache_usage_ratio" in metrics


def _metric(base: str, name: str) -> float:
    for line in httpx.get(base + "/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def _serve(llm, ctx_size=CTX, **options):
    app = create_app(lambda: llm, MODEL_ID, ctx_size=ctx_size, **options)
    srv, port, thread = serve_in_thread(app)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while httpx.get(base + "/health").status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.02)
    return srv, thread, base


def test_prefix_outlives_its_slot(llm):
    """One slot: request A (system prompt S), then B (an unrelated prompt) takes the slot, then C (S again)
    still maps S's KV blocks from the pool (a per-slot cache would have lost them to B): /metrics counts the
    hit and the cached blocks, and C's tokens are those of a fresh run."""
    srv, thread, base = _serve(llm, parallel=1, prefill_chunk=32)
    try:
        gen = torch.Generator().manual_seed(11)
        system = torch.randint(10, 390, (100,), generator=gen).tolist()
        other = torch.randint(10, 390, (90,), generator=gen).tolist()
        body = {"model": MODEL_ID, "max_tokens": 6, "temperature": 0, "logprobs": 0}
        assert httpx.post(base + "/v1/completions", json=dict(body, prompt=system + [5, 6])).status_code == 200
        cached_after_a = _metric(base, "torchburn_kv_cache_blocks_cached")
        assert cached_after_a >= 96 // 16  # S's whole 32-token chunks stay in the pool with no holder
        assert _metric(base, "torchburn_kv_cache_blocks_in_use") == 0
        assert httpx.post(base + "/v1/completions", json=dict(body, prompt=other)).status_code == 200
        hits, reused = _metric(base, "torchburn_prefix_cache_hits_total"), \
            _metric(base, "torchburn_prompt_tokens_reused_total")
        prompt_c = system + [7, 8, 9]
        out = httpx.post(base + "/v1/completions", json=dict(body, prompt=prompt_c)).json()
        assert _metric(base, "torchburn_prefix_cache_hits_total") == hits + 1
        assert _metric(base, "torchburn_prompt_tokens_reused_total") == reused + 96
        assert out["usage"]["prompt_tokens_details"]["cached_tokens"] == 96
        llm.reset()
        expected = llm.generate_tokens(prompt_c, max_tokens=6, temperature=0.0)
        assert out["usage"]["completion_tokens"] == len(expected)
        text = llm.tokenizer.decode([t for t in expected if t not in llm.stop_token_ids], skip_special_tokens=True)
        assert out["choices"][0]["text"] == text
        assert 0 <= _metric(base, "torchburn_kv_cache_usage_ratio") <= 1
    finally:
        srv.should_exit = True
        thread.join(10)


def test_kv_pool_full_preempts_and_both_finish(llm):
    """A pool of 24 blocks (384 positions): a streamed greedy generation of 16 + 300 positions and, sent with
    it, one of 64 + 250 cannot both fit, each alone can (they decode in lockstep, so their sum passes the
    bound ~150 steps in). The more recent one is preempted (its blocks given back), waits in the queue and
    resumes by replaying its tokens: both finish with exactly the text of their run alone, and /metrics
    counts the preemption. A request that outgrows the pool even alone gets a 503 in OpenAI's error JSON
    naming the KV cache, and the server stays healthy and serves again."""
    srv, thread, base = _serve(llm, ctx_size=2048, parallel=2, prefill_chunk=32, kv_blocks=24)
    try:
        gen = torch.Generator().manual_seed(12)
        long_prompt = torch.randint(10, 390, (16,), generator=gen).tolist()
        big_prompt = torch.randint(10, 390, (64,), generator=gen).tolist()
        long_body = {"model": MODEL_ID, "prompt": long_prompt, "max_tokens": 300, "temperature": 0,
                     "stream": True}
        big_body = {"model": MODEL_ID, "prompt": big_prompt, "max_tokens": 250, "temperature": 0}

        async def both():  # sent together, so both are in the engine at once
            async with httpx.AsyncClient(base_url=base, timeout=120) as c:
                async def streamed():
                    async with c.stream("POST", "/v1/completions", json=long_body) as r:
                        return [line async for line in r.aiter_lines() if line.startswith("data: ")]
                return await asyncio.gather(streamed(), c.post("/v1/completions", json=big_body))

        events, big = asyncio.run(both())
        assert events[-1] == "data: [DONE]" and not any('"error"' in e for e in events), events[-2:]
        assert big.status_code == 200, big.text
        streamed_text = "".join(json.loads(e[6:])["choices"][0]["text"] for e in events[:-1])
        assert _metric(base, "torchburn_requests_preempted_total") >= 1
        assert _metric(base, "torchburn_kv_cache_blocks_in_use") == 0
        for prompt, body, text in ((long_prompt, long_body, streamed_text),
                                   (big_prompt, big_body, big.json()["choices"][0]["text"])):
            llm.reset()
            expected = llm.generate_tokens(prompt, max_tokens=body["max_tokens"], temperature=0.0)
            assert len(expected) > 200  # long enough to pass the pool's bound together (and `llm`'s CTX holds it)
            assert text == llm.tokenizer.decode([t for t in expected if t not in llm.stop_token_ids],
                                                skip_special_tokens=True)
            if body is big_body:
                assert big.json()["usage"]["completion_tokens"] == len(expected)
        alone = httpx.post(base + "/v1/completions", json=dict(long_body, max_tokens=700, stream=False), timeout=120)
        assert alone.status_code == 503, alone.text
        failed = alone.json()["error"]
        assert failed["code"] == "kv_cache_full" and "KV cache is full" in failed["message"], failed
        assert failed["type"] == "server_error"
        assert httpx.get(base + "/health").status_code == 200
        again = httpx.post(base + "/v1/completions", json=dict(big_body, max_tokens=20), timeout=120)
        assert again.status_code == 200
    finally:
        srv.should_exit = True
        thread.join(10)


def test_malformed_requests_are_4xx(server):
    url = server[0]
    chat = url + "/v1/chat/completions"
    ok_messages = [{"role": "user", "content": "hi"}]
    cases = [
        ("POST", chat, b"{not json", 400), ("POST", chat, b"[1, 2]", 400), ("POST", chat, b"\xff\xfe", 400),
        ("POST", chat, {"messages": "hi"}, 400), ("POST", chat, {"messages": []}, 400),
        ("POST", chat, {"messages": [{"role": "wizard", "content": "x"}]}, 400),
        ("POST", chat, {"messages": [{"role": "user", "content": 5}]}, 400),
        ("POST", chat, {"model": "gpt-17", "messages": ok_messages}, 404),
        ("POST", chat, {"model": 3, "messages": ok_messages}, 400),
        ("POST", chat, {"messages": ok_messages, "max_tokens": 0}, 400),
        ("POST", chat, {"messages": ok_messages, "max_tokens": -5}, 400),
        ("POST", chat, {"messages": ok_messages, "max_tokens": 10**12}, 400),
        ("POST", chat, {"messages": ok_messages, "max_tokens": "10"}, 400),
        ("POST", chat, {"messages": ok_messages, "max_tokens": 2.5}, 400),
        ("POST", chat, b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', 400),
        ("POST", chat, {"messages": ok_messages, "temperature": 9}, 400),
        ("POST", chat, {"messages": ok_messages, "top_p": "x"}, 400),
        ("POST", chat, {"messages": ok_messages, "n": 3}, 400),
        ("POST", chat, {"messages": ok_messages, "stop": [1]}, 400),
        ("POST", chat, {"messages": ok_messages, "stream": "yes"}, 400),
        ("POST", chat, {"messages": ok_messages, "presence_penalty": 5}, 400),
        ("POST", chat, {"messages": ok_messages, "top_logprobs": 50, "logprobs": True}, 400),
        ("POST", chat, {"messages": ok_messages, "response_format": {"type": "json_schema"}}, 400),
        ("POST", chat, {"messages": [{"role": "user", "content": "fox " * 2000}]}, 400),
        ("POST", url + "/v1/completions", {"prompt": 5}, 400),
        ("POST", url + "/v1/completions", {"prompt": [1, 99999]}, 400),
        ("POST", url + "/v1/completions", {"prompt": ""}, 400),
        ("POST", url + "/v1/completions", {"prompt": "hi", "logprobs": 9}, 400),
        ("GET", chat, None, 405), ("POST", url + "/v1/nothing", {}, 404),
    ]
    huge = [("POST", chat, b"x" * (10 * 1024 * 1024), 413)]  # 10 MB bodies
    with httpx.Client(timeout=30) as http:
        for method, target, body, status in cases * 33 + huge * 3:  # 993 requests
            content = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
            response = http.request(method, target, content=content, headers={"content-type": "application/json"})
            assert response.status_code == status, (body if isinstance(body, dict) else str(body)[:60], response.text)
            error = response.json()["error"]
            assert isinstance(error["message"], str) and error["message"] and "type" in error
        assert http.get(url + "/health").status_code == 200
        assert http.post(chat, json={"messages": ok_messages, "max_tokens": 2}).status_code == 200
    assert _engine_stats(server)["active"] == 0


def _rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_memory_flat_over_requests(server):
    chat = server[0] + "/v1/chat/completions"
    body = {"messages": [{"role": "user", "content": "fox"}], "max_tokens": 3, "temperature": 0.5}
    with httpx.Client(timeout=30) as http:
        for _ in range(100):  # warm up allocators and caches
            assert http.post(chat, json=body).status_code == 200
        start = _rss_kb()
        for i in range(2000):
            assert http.post(chat, json=dict(body, stream=i % 2 == 0)).status_code == 200
        grown = _rss_kb() - start
    assert grown < 20 * 1024, f"RSS grew {grown} kB over 2,000 requests"


# ---------------------------------------------------------------- scale-out: two replicas behind haproxy


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} never became healthy")


def test_haproxy_two_replicas(model_dir, llm):
    """deploy/haproxy.cfg with two `torchburn-llm serve` processes: one endpoint, session affinity, and
    answers keep coming after one replica is killed (health-check ejection + redispatch)."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    haproxy = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)
    if haproxy is None:
        pytest.skip("haproxy is not installed (CI installs it: apt-get install haproxy)")
    config = Path(__file__).resolve().parents[2] / "deploy" / "haproxy.cfg"
    ports = [_free_port() for _ in range(3)]
    env = dict(os.environ, TB_LB_BIND=f"127.0.0.1:{ports[0]}", TB_REPLICA1=f"127.0.0.1:{ports[1]}",
               TB_REPLICA2=f"127.0.0.1:{ports[2]}")
    replicas = [subprocess.Popen([sys.executable, "-m", "torchburn.llm", "serve", "--model", str(model_dir),
                                  "--quant", "int4", "--port", str(port), "--parallel", "2", "--ctx-size", "256",
                                  "--threads", "1", "--model-name", MODEL_ID], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for port in ports[1:]]
    balancer = None
    try:
        for port in ports[1:]:
            _wait_healthy(f"http://127.0.0.1:{port}")
        balancer = subprocess.Popen([haproxy, "-db", "-f", str(config)], env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{ports[0]}"
        _wait_healthy(base)
        client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=30)

        def ask(session: str):
            raw = client.chat.completions.with_raw_response.create(
                model=MODEL_ID, messages=[{"role": "user", "content": f"hello {session}"}], max_tokens=4,
                temperature=0, extra_headers={"X-Session-Id": session})
            return raw.headers["x-served-by"], raw.parse().choices[0].message.content

        time.sleep(2.5)  # both replicas pass `rise 2` health checks
        first = {s: ask(s) for s in (f"session-{i}" for i in range(12))}
        assert {s: ask(s) for s in reversed(list(first))} == first  # affinity: same replica, same (greedy) answer
        assert {served for served, _ in first.values()} == {"replica1", "replica2"}
        replicas[0].kill()
        replicas[0].wait(10)
        answers = [ask(s) for s in first]  # those of replica1 are retried on replica2 until it is ejected
        assert all(served == "replica2" for served, _ in answers)
        assert [text for _, text in answers] == [text for _, text in first.values()]  # same weights, same tokens
    finally:
        for process in ([balancer] if balancer else []) + replicas:
            process.kill()
            process.wait(10)


def test_engine_refuses_bad_options_and_requests(llm):
    from torchburn import _C

    with pytest.raises(ValueError, match="slots"):
        _C._LLMBatch(llm._model, 0, 64)
    with pytest.raises(ValueError, match="prefill_chunk"):
        _C._LLMBatch(llm._model, 2, 64, 20)
    with pytest.raises(ValueError, match="batch_tokens"):
        _C._LLMBatch(llm._model, 2, 64, 32, False, 16)
    engine = _C._LLMBatch(llm._model, 2, 64)
    try:
        with pytest.raises(ValueError, match="ctx_size"):
            engine.submit(list(range(65)), 4)
        with pytest.raises(ValueError, match="vocabulary"):
            engine.submit([1, 400], 4)
        with pytest.raises(ValueError, match="max_tokens"):
            engine.submit([1, 2], 0)
        with pytest.raises(ValueError, match="temperature"):
            engine.submit([1, 2], 4, temperature=float("nan"))
        with pytest.raises(ValueError, match="tokenizer"):  # a JSON constraint needs the token bytes
            engine.submit([1, 2], 4, json=True)
        request = engine.submit([1, 2, 3], 4, stop_ids=[])
        events = []
        while not events or events[-1][2] is None:
            engine.wait(5.0)
            events += engine.poll()
        assert [e[0] for e in events] == [request] * 4 and events[-1][2] == "length"
        assert events[-1][5] == {"prompt_tokens": 3, "reused_tokens": 0, "generated_tokens": 4}
    finally:
        engine.close()
    with pytest.raises(RuntimeError, match="closed"):
        engine.submit([1], 1)


def test_engine_json_without_stop_ids_ends_with_the_object(llm):
    """With no stop ids the engine ends a JSON request as the object closes (finish "stop", the last token
    is the one holding the closing brace); the tokens decode to an object."""
    from torchburn import _C

    with pytest.raises(TypeError, match="_Tokenizer"):
        _C._LLMBatch(llm._model, 2, 64, tokenizer="not a tokenizer")
    engine = _C._LLMBatch(llm._model, 4, 128, tokenizer=llm.tokenizer._tok)
    try:
        requests = {engine.submit([5, 6, 7], 40, temperature=1.0, seed=seed, stop_ids=[], json=True): []
                    for seed in range(12)}
        done: dict = {}
        while len(done) < len(requests):
            engine.wait(5.0)
            for event in engine.poll():
                requests[event[0]].append(event[1])
                if event[2] is not None:
                    done[event[0]] = event[2]
        stopped = [tokens for rid, tokens in requests.items() if done[rid] == "stop"]
        assert stopped and all(done[rid] in ("stop", "length") for rid in requests)
        for tokens in stopped:
            text = llm.tokenizer.decode(tokens)
            assert isinstance(json.loads(text), dict) and text.endswith("}"), text
            with pytest.raises(ValueError):  # one token earlier the object was not complete yet
                json.loads(llm.tokenizer.decode(tokens[:-1]))
    finally:
        engine.close()


def test_bench_peer_skip_reasons(tmp_path):
    """`python -m torchburn.bench serve` skips llama-server, saying why, when it cannot run it."""
    from torchburn.bench.serve import _peer_skip_reason

    assert "TORCHBURN_LLAMA_SERVER is not set" in _peer_skip_reason(None, None)
    missing = str(tmp_path / "llama-server")
    assert "not an executable file" in _peer_skip_reason(missing, None)
    binary = tmp_path / "fake-llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o644)
    assert "not an executable file" in _peer_skip_reason(str(binary), None)
    binary.chmod(0o755)
    assert "--peer-model" in _peer_skip_reason(str(binary), None)
    assert "does not exist" in _peer_skip_reason(str(binary), str(tmp_path / "model.gguf"))
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    assert _peer_skip_reason(str(binary), str(tmp_path / "model.gguf")) is None
