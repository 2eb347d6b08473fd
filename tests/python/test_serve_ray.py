"""The Ray Serve deployment (torchburn.llm.serve_ray): two replicas of the server app behind Ray Serve's
proxy on loopback answer OpenAI requests with the greedy tokens of LLM.generate_tokens. Skipped (saying
so) where ray is not installed."""
import socket
import time

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'torchburn[ray]' to run this test)")
serve = pytest.importorskip("ray.serve", reason="ray is installed without Serve (pip install 'ray[serve]')")

import httpx  # noqa: E402
import openai  # noqa: E402

from test_serve import MODEL_ID, model_dir  # noqa: E402,F401  (the same tiny random model fixture)
from torchburn.llm import LLM  # noqa: E402
from torchburn.llm.serve_ray import deployment  # noqa: E402


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_ray_serve_two_replicas(model_dir, tmp_path):  # noqa: F811
    import os

    os.environ.setdefault("TORCHBURN_CACHE_DIR", str(tmp_path / "cache"))
    port = _free_port()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"TORCHBURN_CACHE_DIR": os.environ["TORCHBURN_CACHE_DIR"]}})
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(deployment(str(model_dir), replicas=2, parallel=2, ctx_size=256, threads=1, num_cpus=0.5,
                             model_name=MODEL_ID), route_prefix="/", name="tb")
        status = serve.status().applications["tb"].deployments["torchburn-llm"]
        assert status.replica_states.get("RUNNING") == 2, status
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        healthy = 0
        while healthy < 6 and time.monotonic() < deadline:  # both replicas' models loaded (requests spread)
            healthy = healthy + 1 if httpx.get(base + "/health", timeout=10).status_code == 200 else 0
            time.sleep(0.1)
        assert healthy >= 6, "the replicas never became healthy"
        llm = LLM.from_pretrained(model_dir, quant="int4", quiet=True, max_seq_len=256)
        ids = list(range(20, 40))  # shorter than the prefill chunk: the tokens are LLM.generate_tokens'
        tokens = llm.generate_tokens(ids, max_tokens=8, temperature=0.0)
        expected = llm.tokenizer.decode([t for t in tokens if t not in llm.stop_token_ids], skip_special_tokens=True)
        client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=60)
        texts = [client.completions.create(model=MODEL_ID, prompt=ids, max_tokens=8, temperature=0).choices[0].text
                 for _ in range(6)]
        assert texts == [expected] * 6
        models = client.models.list()
        assert [m.id for m in models.data] == [MODEL_ID]
    finally:
        serve.shutdown()
        ray.shutdown()
