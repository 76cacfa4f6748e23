"""Tiny randomly initialised Qwen2 / Qwen3 models in Hugging Face format, made with
`transformers` for the model tests (nothing is fetched from a hub). Weights are drawn away from
transformers' near-zero init (norm weights around 1, biases non-zero, larger projections) so
that logits are far from uniform and greedy decoding is not a constant.

As a script: python3 tiny_models.py DIR [qwen2|qwen3] [--grads]  (used by the C++ tests);
--grads also writes DIR/reference_grads.safetensors: the gradient of every parameter (HF
names) of loss = -sum of the token log-probs of GRAD_IDS, for the autograd test."""
import os
import sys

import torch

from bpe_fixtures import train_bpe
CORPUS = ["def forward(self, x):\n    return torch.relu(x) * 2\n",
          "__global__ void add(const float* a, float* out, int n) { int i = blockIdx.x; }\n",
          "You write fast CUDA kernels. Write a kernel for softmax over rows.\n"] * 50


def make_tokenizer(path):
    return train_bpe(path, CORPUS, "qwen", vocab_size=400)


def make_model(directory, arch="qwen2", tie=False, seed=0, vocab=None, dtype=torch.float32, max_positions=256,
               attention_bias=True):
    import transformers
    os.makedirs(directory, exist_ok=True)
    tok = make_tokenizer(os.path.join(directory, "tokenizer.json"))
    vocab = vocab or tok.get_vocab_size()
    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
                  rms_norm_eps=1e-6, tie_word_embeddings=tie, eos_token_id=tok.token_to_id("<|im_end|>"))
    if arch == "qwen2":
        cfg = transformers.Qwen2Config(rope_theta=10000.0, **common)
        cls = transformers.Qwen2ForCausalLM
    else:
        cfg = transformers.Qwen3Config(head_dim=24, attention_bias=attention_bias, rope_theta=1000.0, **common)
        cls = transformers.Qwen3ForCausalLM
    torch.manual_seed(seed)
    model = cls(cfg).to(dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.3 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5 * 1.5)
    model.eval()
    model.save_pretrained(directory)
    return model, tok


GRAD_IDS = [5, 17, 33, 100, 7, 250, 3, 9, 41, 12, 77, 150]


def write_reference_grads(model, directory):
    from safetensors.torch import save_file
    model.zero_grad()
    ids = torch.tensor([GRAD_IDS])
    lp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1).gather(-1, ids[0, 1:, None])
    (-lp.sum()).backward()
    grads = {n: p.grad.contiguous() for n, p in model.named_parameters() if p.grad is not None}
    grads["loss"] = (-lp.sum()).detach().reshape(1)
    save_file(grads, os.path.join(directory, "reference_grads.safetensors"))


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    model, _ = make_model(args[0], args[1] if len(args) > 1 else "qwen2", tie=(len(args) > 1 and args[1] == "qwen3"))
    if "--grads" in sys.argv:
        write_reference_grads(model, args[0])
