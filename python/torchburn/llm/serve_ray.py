"""Ray Serve deployment of the ``torchburn-llm serve`` app: each replica is a Ray actor that builds the same
ASGI app as the standalone server (:func:`torchburn.llm.serve.create_app`) and so loads the model and runs
its own C batching engine; Ray Serve's HTTP proxy spreads requests over the replicas. Needs the optional
``ray`` extra (``pip install "torchburn[ray]"``, i.e. ``ray[serve]``).

Example::

    >>> from ray import serve                                                        # doctest: +SKIP
    >>> from torchburn.llm.serve_ray import deployment                               # doctest: +SKIP
    >>> serve.run(deployment("Qwen/Qwen2.5-0.5B-Instruct", replicas=2), route_prefix="/")  # doctest: +SKIP

Every endpoint, schema and error of docs/serving.md is the same; ``/health`` is 503 on a replica until its
model is loaded. Threads: give each replica ``num_cpus`` CPUs and ``threads`` kernel threads to match.
"""
from __future__ import annotations

from typing import Any, Optional

__all__ = ["deployment"]


def deployment(model: str, *, quant: str = "int4", replicas: int = 2, parallel: int = 4, ctx_size: int = 4096,
               prefill_chunk: int = 64, batch_tokens: int = 0, threads: Optional[int] = None,
               group_size: int = 64, model_name: Optional[str] = None, num_cpus: float = 1.0,
               name: str = "torchburn-llm") -> Any:
    """A bound Ray Serve application (pass it to ``serve.run``) with ``replicas`` copies of the server app.
    The arguments are those of ``torchburn-llm serve``."""
    from ray import serve

    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {replicas}")

    def build_app():  # runs on each replica
        from .serve import create_app

        def load():
            from .model import LLM

            return LLM.from_pretrained(model, quant=quant, num_threads=threads, max_seq_len=ctx_size,
                                       group_size=group_size, quiet=True)

        return create_app(load, model_name or str(model), parallel=parallel, ctx_size=ctx_size,
                          prefill_chunk=prefill_chunk, batch_tokens=batch_tokens)

    ingress = serve.ingress(build_app)()
    return serve.deployment(ingress, name=name, num_replicas=replicas,
                            ray_actor_options={"num_cpus": num_cpus}).bind()
