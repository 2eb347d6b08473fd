"""``torchburn-llm serve``: an OpenAI-compatible HTTP server over the C continuous-batching engine.

    torchburn-llm serve --model Qwen/Qwen2.5-0.5B-Instruct --quant int4 --port 8000 --parallel 4

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/completions`` (both with ``stream``), ``GET /v1/models``,
``GET /health`` (503 while the model loads, 200 when ready), ``GET /metrics`` (Prometheus text). The HTTP
layer is uvicorn + starlette (the ``serve`` extra); docs/serving.md says why and documents the contract.

Example (any OpenAI client)::

    >>> from openai import OpenAI                                                     # doctest: +SKIP
    >>> client = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")         # doctest: +SKIP
    >>> client.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}])  # doctest: +SKIP
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import json
import threading
import time
import uuid
from typing import Any, Callable, Optional, Sequence

from .engine import BatchEngine, GenerationParams, Piece
from .openai_api import ApiError, chat_messages, completion_prompt, error_body, parse_generation

__all__ = ["create_app", "main"]

MAX_BODY_BYTES = 4 * 1024 * 1024


class _State:
    def __init__(self, model_id: str, api_key: Optional[str]) -> None:
        self.model_id = model_id
        self.api_key = api_key
        self.llm = None
        self.engine: Optional[BatchEngine] = None
        self.load_error: Optional[str] = None
        self.created = int(time.time())
        self.responses: dict[str, int] = {}
        self.started = time.monotonic()


def create_app(load: Callable[[], Any], model_id: str, api_key: Optional[str] = None, parallel: int = 4,
               ctx_size: Optional[int] = None, prefill_chunk: int = 0, batch_tokens: int = 0, kv_blocks: int = 0):
    """The ASGI app. ``load()`` returns a :class:`~torchburn.llm.LLM`; it runs on a thread at startup so that
    ``/health`` answers 503 meanwhile."""
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
    from starlette.routing import Route

    state = _State(model_id, api_key)

    def error(status: int, message: str, param=None, code=None, kind=None) -> JSONResponse:
        return JSONResponse(error_body(status, message, param, code, kind), status_code=status)

    def count(status: int) -> None:
        state.responses[str(status)] = state.responses.get(str(status), 0) + 1

    async def load_model() -> None:
        loop = asyncio.get_running_loop()
        try:
            llm = await loop.run_in_executor(None, load)
            engine = BatchEngine(llm, slots=parallel, ctx_size=ctx_size, prefill_chunk=prefill_chunk,
                                 batch_tokens=batch_tokens, kv_blocks=kv_blocks)
        except Exception as exc:  # reported by /health; the server stays up to say so
            state.load_error = f"{type(exc).__name__}: {exc}"
            return
        engine.attach(loop)
        state.llm, state.engine = llm, engine

    @contextlib.asynccontextmanager
    async def lifespan(app):
        task = asyncio.ensure_future(load_model())
        yield
        task.cancel()
        if state.engine is not None:
            state.engine.close()

    def authorized(request: Request) -> bool:
        if not state.api_key:
            return True
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), state.api_key.encode())

    async def read_json(request: Request) -> dict:
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            raise ApiError(413, f"request body exceeds {MAX_BODY_BYTES} bytes", code="request_too_large")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise ApiError(413, f"request body exceeds {MAX_BODY_BYTES} bytes", code="request_too_large")
            chunks.append(chunk)
        try:
            body = json.loads(b"".join(chunks).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ApiError(400, f"the request body is not valid JSON: {exc}", code="invalid_json")
        except RecursionError:
            raise ApiError(400, "the request body nests too deeply", code="invalid_json")
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise ApiError(400, "'model' must be a string", "model", "invalid_type")
        if model not in (None, "", state.model_id):
            raise ApiError(404, f"The model '{model}' does not exist (this server serves '{state.model_id}')",
                           "model", "model_not_found")
        return body

    def guard(handler):
        async def wrapped(request: Request) -> Response:
            try:
                if not authorized(request):
                    response = error(401, "Incorrect API key provided", code="invalid_api_key")
                elif state.engine is None:
                    response = error(503, "the model is still loading" if state.load_error is None
                                     else f"the model failed to load: {state.load_error}", code="model_not_ready",
                                     kind="server_error")
                else:
                    response = await handler(request)
            except ApiError as exc:
                response = error(exc.status, exc.message, exc.param, exc.code)
            except ClientDisconnect:
                response = Response(status_code=499)
            except Exception as exc:  # a bug: answer 500 in OpenAI's shape and keep serving
                response = error(500, f"internal error: {type(exc).__name__}: {exc}", code="internal_error",
                                 kind="server_error")
            count(response.status_code)
            return response
        return wrapped

    def encode(prompt: Any, chat: bool) -> list[int]:
        llm = state.llm
        try:
            if chat:
                return llm.encode_prompt(prompt)
            if isinstance(prompt, str):
                return llm.encode_prompt(prompt)
            vocab = llm.config["vocab_size"]
            if any(t < 0 or t >= vocab for t in prompt):
                raise ApiError(400, f"prompt token ids must be in [0, {vocab})", "prompt", "invalid_value")
            return list(prompt)
        except ValueError as exc:
            raise ApiError(400, str(exc), "messages" if chat else "prompt", "invalid_value")

    def logprobs_json(pieces_tokens: list, chat: bool) -> Any:
        tokenizer = state.llm.tokenizer

        def text(token: int) -> str:
            return tokenizer.decode([token], skip_special_tokens=False)

        def number(x: Optional[float]) -> float:
            return x if x is not None and x == x and x > -1e30 else -9999.0

        if chat:
            return {"content": [{"token": text(t), "logprob": number(lp), "bytes": list(text(t).encode()),
                                 "top_logprobs": [{"token": text(i), "logprob": number(v),
                                                   "bytes": list(text(i).encode())} for i, v in top]}
                                for t, lp, top in pieces_tokens], "refusal": None}
        return {"tokens": [text(t) for t, _, _ in pieces_tokens],
                "token_logprobs": [number(lp) for _, lp, _ in pieces_tokens],
                "top_logprobs": [{text(i): number(v) for i, v in top} for _, _, top in pieces_tokens],
                "text_offset": []}

    async def until_disconnected(request: Request) -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    def engine_error(piece: Piece) -> ApiError:
        """A request the engine failed: out of memory (the KV pool full while other requests hold it) is a
        503 the client may retry; anything else a 500."""
        message = piece.error or state.engine.stats["last_error"]
        if piece.error_status == "TB_ERR_OUT_OF_MEMORY":
            return ApiError(503, f"The server is out of KV cache memory for this request: {message}. Retry later, "
                                 "or start the server with a larger --kv-blocks.", code="kv_cache_full",
                            kind="server_error")
        return ApiError(500, "the engine failed: " + message, code="engine_error", kind="server_error")

    async def run(request: Request, chat: bool) -> Response:
        body = await read_json(request)
        prompt = chat_messages(body) if chat else completion_prompt(body)
        ids = encode(prompt, chat)
        params, stream = parse_generation(body, len(ids), state.engine.ctx_size, chat)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        want_logprobs = params.logprobs >= 0
        kind = "chat.completion" if chat else "text_completion"
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        try:
            pieces = state.engine.generate(ids, params)
            first = await pieces.__anext__()  # submission errors surface here, before any byte is sent
        except ValueError as exc:
            raise ApiError(400, str(exc), code="invalid_value")
        if first.finish_reason == "error":
            raise engine_error(first)

        def usage(last: Piece) -> dict:
            return {"prompt_tokens": last.prompt_tokens, "completion_tokens": last.completion_tokens,
                    "total_tokens": last.prompt_tokens + last.completion_tokens,
                    "prompt_tokens_details": {"cached_tokens": last.reused_tokens}}

        def finish_reason(piece: Piece) -> Optional[str]:
            return {"cancelled": "stop", "error": "stop"}.get(piece.finish_reason, piece.finish_reason)

        if not stream:
            collected, tokens, last = [first.text], list(first.tokens), first
            waiter = asyncio.ensure_future(until_disconnected(request))
            try:
                while last.finish_reason is None:
                    step = asyncio.ensure_future(pieces.__anext__())
                    done, _ = await asyncio.wait({step, waiter}, return_when=asyncio.FIRST_COMPLETED)
                    if step not in done:
                        step.cancel()
                        await pieces.aclose()  # cancels the request in the engine
                        return Response(status_code=499)
                    last = step.result()
                    collected.append(last.text)
                    tokens += last.tokens
            finally:
                waiter.cancel()
                await pieces.aclose()
            if last.finish_reason == "error":
                raise engine_error(last)
            text = "".join(collected)
            if chat:
                choice = {"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                          "logprobs": logprobs_json(tokens, True) if want_logprobs else None,
                          "finish_reason": finish_reason(last)}
            else:
                choice = {"index": 0, "text": text, "logprobs": logprobs_json(tokens, False) if want_logprobs else None,
                          "finish_reason": finish_reason(last)}
            return JSONResponse({"id": rid, "object": kind, "created": created, "model": state.model_id,
                                 "system_fingerprint": "torchburn", "choices": [choice], "usage": usage(last)})

        chunk_kind = "chat.completion.chunk" if chat else "text_completion"

        def chunk(piece: Optional[Piece], role: bool = False) -> str:
            if chat:
                delta: dict = {"role": "assistant", "content": ""} if role else {}
                if piece is not None and piece.text:
                    delta["content"] = piece.text
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
            else:
                choice = {"index": 0, "text": piece.text if piece else "", "logprobs": None, "finish_reason": None}
            if piece is not None and want_logprobs and piece.tokens:
                choice["logprobs"] = logprobs_json(piece.tokens, chat)
            if piece is not None and piece.finish_reason is not None:
                choice["finish_reason"] = finish_reason(piece)
            data = {"id": rid, "object": chunk_kind, "created": created, "model": state.model_id,
                    "system_fingerprint": "torchburn", "choices": [choice]}
            if include_usage:
                data["usage"] = None
            return f"data: {json.dumps(data)}\n\n"

        async def events():
            try:
                if chat:
                    yield chunk(None, role=True)
                piece = first
                while True:
                    if piece.finish_reason == "error":  # headers are sent: the error goes in the stream
                        failure = engine_error(piece)
                        yield f"data: {json.dumps(error_body(failure.status, failure.message, None, failure.code, failure.kind))}\n\n"
                        return
                    if piece.text or piece.finish_reason is not None or (want_logprobs and piece.tokens):
                        yield chunk(piece)
                    if piece.finish_reason is not None:
                        break
                    piece = await pieces.__anext__()
                if include_usage:
                    data = {"id": rid, "object": chunk_kind, "created": created, "model": state.model_id,
                            "choices": [], "usage": usage(piece)}
                    yield f"data: {json.dumps(data)}\n\n"
                yield "data: [DONE]\n\n"
            finally:
                await pieces.aclose()  # a client that went away cancels its request here

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def chat_completions(request: Request) -> Response:
        return await run(request, chat=True)

    async def completions(request: Request) -> Response:
        return await run(request, chat=False)

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": state.model_id, "object": "model",
                                                          "created": state.created, "owned_by": "torchburn"}]})

    async def health(request: Request) -> Response:
        if state.engine is None:
            status = "error" if state.load_error else "loading"
            return JSONResponse({"status": status, "error": state.load_error}, status_code=503)
        stats = state.engine.stats
        return JSONResponse({"status": "ok", "slots": stats["slots"], "active": stats["active"],
                             "queued": stats["queued"]})

    async def metrics(request: Request) -> Response:
        lines = []

        def metric(name: str, kind: str, help_text: str, value: Any, labels: str = "") -> None:
            if not any(line.startswith(f"# TYPE {name} ") for line in lines):
                lines.append(f"# HELP {name} {help_text}")
                lines.append(f"# TYPE {name} {kind}")
            lines.append(f"{name}{labels} {value}")

        metric("torchburn_up", "gauge", "1 when the model is loaded", int(state.engine is not None))
        for code, n in sorted(state.responses.items()):
            metric("torchburn_http_responses_total", "counter", "HTTP responses of the API endpoints by status",
                   n, f'{{code="{code}"}}')
        if state.engine is not None:
            s = state.engine.stats
            metric("torchburn_requests_total", "counter", "generation requests submitted", s["requests_submitted"])
            metric("torchburn_requests_finished_total", "counter", "generation requests finished", s["requests_finished"])
            metric("torchburn_requests_cancelled_total", "counter", "requests cancelled (client gone, stop string)",
                   s["requests_cancelled"])
            metric("torchburn_prompt_tokens_total", "counter", "prompt tokens of admitted requests", s["prompt_tokens"])
            metric("torchburn_prompt_tokens_reused_total", "counter", "prompt tokens served from the prefix cache",
                   s["reused_tokens"])
            metric("torchburn_prefix_cache_hits_total", "counter", "requests that reused a cached prefix",
                   s["prefix_hits"])
            metric("torchburn_generation_tokens_total", "counter", "tokens generated", s["generated_tokens"])
            metric("torchburn_queue_depth", "gauge", "requests waiting for a slot", s["queued"])
            metric("torchburn_active_slots", "gauge", "slots holding a request", s["active"])
            metric("torchburn_slots", "gauge", "slots (--parallel)", s["slots"])
            prefill = s["prefill_tokens_run"] / s["prefill_seconds"] if s["prefill_seconds"] > 0 else 0.0
            decode = s["decode_rows"] / s["decode_seconds"] if s["decode_seconds"] > 0 else 0.0
            metric("torchburn_prefill_tokens_per_second", "gauge", "prompt tokens per second of prefill time", prefill)
            metric("torchburn_decode_tokens_per_second", "gauge", "tokens per second of batched decode time", decode)
            metric("torchburn_decode_batch_size_mean", "gauge", "sequences per decode step, mean",
                   s["decode_rows"] / s["decode_steps"] if s["decode_steps"] else 0.0)
            if s["kv_blocks"]:  # the shared block pool (CPU models)
                metric("torchburn_kv_cache_usage_ratio", "gauge", "KV pool blocks held by requests over pool blocks",
                       s["kv_blocks_in_use"] / s["kv_blocks"])
                metric("torchburn_kv_cache_blocks", "gauge", "KV pool blocks of 16 positions (--kv-blocks)",
                       s["kv_blocks"])
                metric("torchburn_kv_cache_blocks_in_use", "gauge", "KV blocks held by running requests",
                       s["kv_blocks_in_use"])
                metric("torchburn_kv_cache_blocks_shared", "gauge", "KV blocks held by more than one request",
                       s["kv_blocks_shared"])
                metric("torchburn_kv_cache_blocks_cached", "gauge",
                       "KV blocks held by no request that keep a prompt prefix for reuse (evicted first when needed)",
                       s["kv_blocks_cached"])
                metric("torchburn_kv_cache_blocks_evicted_total", "counter", "cached KV blocks evicted for reuse",
                       s["kv_blocks_evicted"])
                metric("torchburn_requests_preempted_total", "counter",
                       "requests whose KV blocks were taken back for others (resumed later, same tokens)",
                       s["preemptions"])
                metric("torchburn_requests_waited_for_kv_total", "counter",
                       "requests held in the queue until the KV pool had blocks for them", s["admission_waits"])
            else:  # GPU models: per-slot caches
                metric("torchburn_kv_cache_usage_ratio", "gauge", "cached positions over slots x ctx_size",
                       s["kv_positions_used"] / s["kv_positions_capacity"])
            metric("torchburn_kv_cache_bytes", "gauge", "bytes of KV cache memory allocated", s["kv_bytes"])
        return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")

    async def not_found(request: Request, exc) -> Response:
        status = getattr(exc, "status_code", 404)
        return error(status, f"{request.method} {request.url.path}: " + ("not found" if status == 404 else
                                                                         "method not allowed"))

    routes = [
        Route("/v1/chat/completions", guard(chat_completions), methods=["POST"]),
        Route("/v1/completions", guard(completions), methods=["POST"]),
        Route("/v1/models", guard(models), methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: not_found, 405: not_found})
    app.state.torchburn = state
    return app


def build_parser(parser: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="torchburn-llm serve",
                                               description="OpenAI-compatible server with continuous batching.")
    parser.add_argument("--model", "-m", required=True, help="model folder or Hugging Face repo id in the local cache")
    parser.add_argument("--quant", "-q", default="int4", choices=["int4", "int8", "none"], help="weight format")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    parser.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on /v1 endpoints")
    parser.add_argument("--parallel", "-np", type=int, default=4, help="slots decoded together (default: 4)")
    parser.add_argument("--ctx-size", "-c", type=int, default=4096, help="positions per slot (default: 4096)")
    parser.add_argument("--prefill-chunk", type=int, default=64,
                        help="prompt tokens per engine step and prefix-reuse granularity (multiple of 16; default 64)")
    parser.add_argument("--batch-tokens", type=int, default=0,
                        help="engine token budget per step: decoding rows plus prompt chunks (0 or >= "
                             "--prefill-chunk; default 0: one prompt chunk per step)")
    parser.add_argument("--kv-blocks", type=int, default=0,
                        help="KV pool size in blocks of 16 positions shared by all slots, allocated as used "
                             "(default 0: --parallel x --ctx-size / 16)")
    parser.add_argument("--threads", "-t", type=int, default=None, help="kernel threads (default: physical cores)")
    parser.add_argument("--model-name", default=None, help="model id reported by /v1/models (default: --model)")
    parser.add_argument("--group-size", type=int, default=64, choices=[32, 64, 128, 256], help="int4 group size")
    return parser


def main(argv: Optional[Sequence[str]] = None, args: Optional[argparse.Namespace] = None) -> int:
    args = args or build_parser().parse_args(argv)
    try:
        import uvicorn
        import starlette  # noqa: F401
    except ImportError:
        print("torchburn-llm serve needs uvicorn and starlette: pip install 'torchburn[serve]'")
        return 2
    for name, value, low in (("--parallel", args.parallel, 1), ("--ctx-size", args.ctx_size, 16),
                             ("--port", args.port, 0)):
        if value < low:
            print(f"torchburn-llm serve: {name} must be >= {low}, got {value}")
            return 2
    if not 0 <= args.kv_blocks <= 2**28:
        print(f"torchburn-llm serve: --kv-blocks must be in [0, 268435456], got {args.kv_blocks}")
        return 2
    if args.batch_tokens != 0 and not args.prefill_chunk <= args.batch_tokens <= 65536:
        print(f"torchburn-llm serve: --batch-tokens must be 0 or in [--prefill-chunk, 65536], got {args.batch_tokens}")
        return 2

    def load():
        from .model import LLM

        ctx = args.ctx_size
        return LLM.from_pretrained(args.model, quant=args.quant, num_threads=args.threads, max_seq_len=ctx,
                                   group_size=args.group_size, quiet=True)

    app = create_app(load, args.model_name or str(args.model), api_key=args.api_key, parallel=args.parallel,
                     ctx_size=args.ctx_size, prefill_chunk=args.prefill_chunk, batch_tokens=args.batch_tokens,
                     kv_blocks=args.kv_blocks)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", timeout_keep_alive=5, h11_max_incomplete_event_size=65536)
    return 0


def serve_in_thread(app, host: str = "127.0.0.1"):
    """Runs `app` with uvicorn on a background thread on a free port; returns (server, port, thread). For tests
    and embedding: ``server.should_exit = True`` stops it."""
    import socket

    import uvicorn

    # proto IPPROTO_TCP (not 0) so that asyncio sets TCP_NODELAY on accepted connections: without it every
    # small response write waits for the client's delayed ACK (~40 ms)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_keep_alive=5))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    return server, port, thread
