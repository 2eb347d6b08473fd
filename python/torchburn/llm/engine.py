"""asyncio front of the C continuous-batching engine (``torchburn._C._LLMBatch``): requests are submitted
to the engine thread, their token events come back through a pipe watched by the event loop, and each
request reads its own queue. Text is detokenized here (streaming-safe), stop strings are cut here, and a
request whose reader goes away is cancelled in C so its slot frees before the next step.

Example::

    >>> engine = BatchEngine(llm, slots=4, ctx_size=2048)                         # doctest: +SKIP
    >>> async for piece in engine.generate(ids, GenerationParams(max_tokens=16)):  # doctest: +SKIP
    ...     print(piece.text, end="")
"""
from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Optional, Sequence

from .. import _C
from .model import LLM, _StopMatcher

__all__ = ["BatchEngine", "GenerationParams", "Piece"]


@dataclass
class GenerationParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: Optional[int] = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop: Sequence[str] = ()
    logprobs: int = -1  # -1 none; else the number of top alternatives per token
    json: bool = False  # the output is one JSON object (the engine's grammar constraint)


@dataclass
class Piece:
    """Text produced by one or more tokens; the last piece of a request has ``finish_reason`` set."""

    text: str
    tokens: list = field(default_factory=list)     # [(token id, logprob or None, [(id, logprob)...])]
    finish_reason: Optional[str] = None            # "stop", "length", "cancelled", "error"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reused_tokens: int = 0
    error: Optional[str] = None         # finish_reason "error": the engine's message
    error_status: Optional[str] = None  # and its status name ("TB_ERR_OUT_OF_MEMORY": the KV cache is full)


class BatchEngine:
    """Many concurrent generations on one :class:`~torchburn.llm.LLM` through the C batching engine."""

    def __init__(self, llm: LLM, slots: int = 4, ctx_size: Optional[int] = None, prefill_chunk: int = 0,
                 batch_tokens: int = 0, kv_blocks: int = 0) -> None:
        self.llm = llm
        self.ctx_size = int(ctx_size or llm.max_seq_len)
        # kv_blocks: the shared KV pool's bound in blocks of 16 positions (0: slots x ctx_size / 16)
        self.engine = _C._LLMBatch(llm._model, int(slots), self.ctx_size, int(prefill_chunk), llm._kv_f16,
                                   int(batch_tokens), llm.tokenizer._tok, int(kv_blocks))
        self.slots = int(slots)
        self._queues: dict[int, Optional[asyncio.Queue]] = {}
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    # ---- event plumbing ----
    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Starts delivering events on `loop` (call from the loop's thread)."""
        self._loop = loop
        loop.add_reader(self.engine.fileno(), self._drain)

    def close(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self.engine.fileno())
            self._loop = None
        self.engine.close()

    def _drain(self) -> None:
        for event in self.engine.poll():
            request_id, finish = event[0], event[2]
            queue = self._queues.get(request_id)
            if queue is not None:
                queue.put_nowait(event)
            if finish is not None and queue is None:
                self._queues.pop(request_id, None)  # a cancelled request's last event

    @property
    def stats(self) -> dict[str, Any]:
        return self.engine.stats

    # ---- generation ----
    async def generate(self, prompt_ids: Sequence[int], params: GenerationParams) -> AsyncIterator[Piece]:
        """Yields :class:`Piece` objects as tokens arrive. Closing the iterator early (a client that went
        away) cancels the request in the engine. ValueError for a request the engine refuses."""
        seed = params.seed if params.seed is not None else random.SystemRandom().getrandbits(64)
        stops = list(self.llm.stop_token_ids)
        request_id = self.engine.submit(
            list(prompt_ids), params.max_tokens, temperature=params.temperature, top_k=params.top_k,
            top_p=params.top_p, seed=seed & (2**64 - 1), presence_penalty=params.presence_penalty,
            frequency_penalty=params.frequency_penalty, stop_ids=stops, logprobs=params.logprobs, json=params.json)
        queue: asyncio.Queue = asyncio.Queue()
        self._queues[request_id] = queue
        stop_set = set(stops)
        decoder = self.llm.tokenizer.decode_stream(skip_special_tokens=True)
        matcher = _StopMatcher(list(params.stop) or None)
        produced = 0
        finished = False
        try:
            while True:
                _, token, finish, logprob, top, final = await queue.get()
                piece = Piece(text="", prompt_tokens=len(prompt_ids))
                if token >= 0:
                    produced += 1
                    piece.tokens.append((token, logprob, top))
                    if token not in stop_set:
                        piece.text = matcher.feed(decoder.step(token) or "")
                if matcher.hit:
                    finish = "stop"
                elif finish is not None:
                    piece.text += matcher.feed(decoder.flush() or "") + matcher.flush()
                    finish = {"aborted": "cancelled"}.get(finish, finish)
                piece.completion_tokens = produced
                if finish is not None:
                    finished = final is not None  # else (a stop string) the engine is still generating
                    piece.finish_reason = finish
                    piece.reused_tokens = final["reused_tokens"] if final else 0
                    if final and "error" in final:
                        piece.error, piece.error_status = final["error"], final["status"]
                    yield piece
                    return
                if piece.text or piece.tokens:
                    yield piece
        finally:
            while not finished and not queue.empty():  # the engine may have finished meanwhile
                finished = queue.get_nowait()[2] is not None
            if finished:
                self._queues.pop(request_id, None)
            else:  # _drain forgets the id when its final (aborted) event arrives
                self._queues[request_id] = None
                self.engine.cancel(request_id)
