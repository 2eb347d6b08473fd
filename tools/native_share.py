"""Native share of tiny transformers models under the torch.compile backend (docs/compile_backend.md).

Builds BERT (also with a padding mask), GPT-2 (with its cache), a grouped-query Llama and ViT from small
configs (random weights, sdpa attention) and prints, as a markdown table, how many FX compute nodes
torchburn.explain says really ran natively: in eval mode under no_grad and with grad on (forward +
backward), and in train mode with grad on (dropout included: its mask is drawn natively from a seed
PyTorch's generator supplies).

Usage: python tools/native_share.py
"""
import torch, torchburn, transformers, warnings
warnings.simplefilter("ignore")
torch.manual_seed(0)
def attn(c): c._attn_implementation = "sdpa"; return c
models = {
 "BERT, padding mask": (None, lambda: (torch.randint(0, 500, (2, 16)), torch.tensor([[1] * 16, [1] * 10 + [0] * 6]))),
 "BERT": (transformers.BertModel(attn(transformers.BertConfig(vocab_size=500, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128))), lambda: (torch.randint(0, 500, (2, 16)),)),
 "GPT-2 (use_cache)": (transformers.GPT2LMHeadModel(attn(transformers.GPT2Config(vocab_size=128, n_embd=64, n_head=4, n_layer=2, n_positions=32))), lambda: (torch.randint(0, 128, (2, 12)),)),
 "Llama GQA 8/2": (transformers.LlamaForCausalLM(attn(transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2))), lambda: (torch.randint(0, 128, (2, 16)),)),
 "ViT": (transformers.ViTModel(attn(transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128))), lambda: (torch.randn(2, 3, 32, 32),)),
}
models["BERT, padding mask"] = (models["BERT"][0], models["BERT, padding mask"][1])
print("| model | no_grad native | grad on (forward + backward) native | train mode, grad on | PyTorch ops (no_grad) |")
print("|---|---|---|---|---|")
for name, (m, inputs) in models.items():
    m.train()
    torch._dynamo.reset()
    rt = torchburn.explain(m, *inputs())
    m.eval()
    torch._dynamo.reset()
    with torch.no_grad(): r = torchburn.explain(m, *inputs())
    torch._dynamo.reset()
    rg = torchburn.explain(m, *inputs())
    ops = ", ".join(sorted({k.split(" (")[0].replace("aten.", "") for k in r.fallback_ops}))
    print(f"| {name} | {r.native_nodes}/{r.total_nodes} ({100*r.native_share:.1f} %) | {rg.native_nodes}/{rg.total_nodes} ({100*rg.native_share:.1f} %) | {rt.native_nodes}/{rt.total_nodes} ({100*rt.native_share:.1f} %) | {ops} |")
