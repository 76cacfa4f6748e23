"""GGUF files written by the tests with ggml's own `gguf` package, laid out as llama.cpp's
convert_hf_to_gguf.py lays out a Qwen2 / Qwen3 model: its metadata keys, tensor names, the
vocabulary with token types (added special tokens CONTROL, other added tokens USER_DEFINED,
[PADn] fillers UNUSED up to the embedding's rows), merges, special-token ids and chat template,
and each tensor quantized by `gguf.quants.quantize` (or, for types gguf-py cannot quantize, raw
blocks the caller supplies)."""
import json

import numpy as np

gguf = __import__("gguf")
Q = gguf.GGMLQuantizationType

# Hugging Face name -> llama.cpp name (the reverse of what the converter maps).
_BLOCK = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
          "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
          "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
          "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
          "self_attn.o_proj.weight": "attn_output.weight", "self_attn.o_proj.bias": "attn_output.bias",
          "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
          "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
          "mlp.down_proj.weight": "ffn_down.weight"}
TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
       "lm_head.weight": "output.weight"}


def gguf_name(hf):
    if hf in TOP:
        return TOP[hf]
    parts = hf.split(".")  # model.layers.N.rest
    return f"blk.{parts[2]}.{_BLOCK['.'.join(parts[3:])]}"


def vocabulary(tokenizer_json, rows):
    """(tokens, token types, merges) of a tokenizer.json, padded with [PADn] to `rows`."""
    j = json.load(open(tokenizer_json))
    by_id = {i: t for t, i in j["model"]["vocab"].items()}
    types = {i: gguf.TokenType.NORMAL for i in by_id}
    for a in j["added_tokens"]:
        by_id[a["id"]] = a["content"]
        types[a["id"]] = gguf.TokenType.CONTROL if a["special"] else gguf.TokenType.USER_DEFINED
    tokens, toktypes = [], []
    for i in range(rows):
        tokens.append(by_id.get(i, f"[PAD{i}]"))
        toktypes.append(types.get(i, gguf.TokenType.UNUSED))
    merges = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    return tokens, toktypes, merges


def quantize(array, qtype):
    """(data, raw_dtype) for GGUFWriter.add_tensor: `array` (float32) in `qtype`."""
    if qtype == Q.F32:
        return array.astype(np.float32), None
    if qtype == Q.F16:
        return array.astype(np.float16), None
    return gguf.quants.quantize(array.astype(np.float32), qtype), qtype


def write(path, config, tensors, tokenizer_json, arch="qwen2", chat_template=None, eos=None, pre="qwen2"):
    """A GGUF at `path`. `config`: the transformers config; `tensors`: {hf name: (data,
    raw_dtype)} as `quantize` returns them (raw_dtype None for F32/F16 numpy data)."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny test model")
    w.add_block_count(config.num_hidden_layers)
    w.add_context_length(config.max_position_embeddings)
    w.add_embedding_length(config.hidden_size)
    w.add_feed_forward_length(config.intermediate_size)
    w.add_head_count(config.num_attention_heads)
    w.add_head_count_kv(config.num_key_value_heads)
    w.add_rope_freq_base(config.rope_parameters["rope_theta"] if getattr(config, "rope_parameters", None)
                         else config.rope_theta)
    w.add_layer_norm_rms_eps(config.rms_norm_eps)
    if arch == "qwen3":
        w.add_key_length(config.head_dim)
        w.add_value_length(config.head_dim)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    tokens, toktypes, merges = vocabulary(tokenizer_json, config.vocab_size)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(toktypes)
    w.add_token_merges(merges)
    w.add_eos_token_id(eos if eos is not None else tokens.index("<|im_end|>"))
    w.add_pad_token_id(tokens.index("<|endoftext|>"))
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(False)
    if chat_template:
        w.add_chat_template(chat_template)
    for name, (data, raw) in tensors.items():
        if raw is None:
            w.add_tensor(gguf_name(name), data)
        else:
            w.add_tensor(gguf_name(name), data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)
