"""Native share of transformers models built from small configs (random weights, nothing downloaded)
under the torch.compile backend: torchburn.explain's share of FX compute nodes that really ran
natively, under no_grad and with grad on (forward + backward graphs), and the ops left to PyTorch.

Usage: python tools/hf_native_share.py [bert|gpt2|llama|vit ...]   (prints a markdown table)
"""
import os
import sys
import warnings

os.environ.setdefault("TORCHBURN_QUIET", "1")
import torch  # noqa: E402
import transformers  # noqa: E402

import torchburn  # noqa: E402

warnings.simplefilter("ignore")
torchburn.register()
SMALL = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256)


def bert():
    config = transformers.BertConfig(vocab_size=1000, **SMALL)
    ids = torch.randint(0, 1000, (2, 16), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 10:] = 0  # padding: the masked-attention path
    return transformers.BertModel(config), (ids, mask)


def gpt2():
    config = transformers.GPT2Config(vocab_size=1000, n_embd=128, n_layer=2, n_head=4, n_positions=64)
    ids = torch.randint(0, 1000, (2, 16), generator=torch.Generator().manual_seed(0))
    return transformers.GPT2LMHeadModel(config), (ids,)


def llama():
    config = transformers.LlamaConfig(vocab_size=1000, num_key_value_heads=2, max_position_embeddings=64, **SMALL)
    ids = torch.randint(0, 1000, (2, 16), generator=torch.Generator().manual_seed(0))
    return transformers.LlamaForCausalLM(config), (ids,)


def vit():
    config = transformers.ViTConfig(image_size=32, patch_size=8, **SMALL)
    return transformers.ViTModel(config), (torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)),)


MODELS = {"bert": bert, "gpt2": gpt2, "llama": llama, "vit": vit}


def share(model, inputs, grad):
    torch._dynamo.reset()
    with torch.set_grad_enabled(grad):
        report = torchburn.explain(model, *inputs)
    left = sorted({k.replace("aten.", "") for k in report.fallback_ops})
    return report.native_share, left, len(report.runtime_fallbacks)


def main(names):
    print("| model | no_grad native | grad on (fw + bw) native | left to PyTorch | run-time fallbacks |")
    print("|---|---|---|---|---|")
    for name in names:
        model, inputs = MODELS[name]()
        model.config._attn_implementation = "sdpa"
        inference, left_i, rt_i = share(model.eval(), inputs, False)
        training, left_t, rt_t = share(model.train(), inputs, True)
        left = ", ".join(sorted(set(left_i) | set(left_t))) or "-"
        print(f"| {name} | {100 * inference:.1f} % | {100 * training:.1f} % | {left} | {rt_i} / {rt_t} |")


if __name__ == "__main__":
    main(sys.argv[1:] or list(MODELS))
