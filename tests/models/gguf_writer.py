"""Test-only: a checkpoint directory written as a llama.cpp-style GGUF with `gguf`'s writer (f32 tensors, the
gpt2-type tokenizer of the directory's tokenizer.json, Q and K in llama.cpp's rotary layout)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.torch import load_file

_LAYER_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
                "post_attention_layernorm": "ffn_norm"}


def _rotary_layout(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert script interleaves each head's rotary halves; transformers' loader undoes it."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(checkpoint: Path, out: Path, architecture: str = "llama", raw_type: str | None = None) -> Path:
    """`raw_type`: the name of a GGML quantisation type (e.g. "Q8_1") whose zero bytes stand in for the first
    layer's down projection, so a reader meets a tensor of that type."""
    import gguf

    cfg = json.loads((checkpoint / "config.json").read_text())
    tensors = {k: v.float().numpy() for k, v in load_file(str(checkpoint / "model.safetensors")).items()}
    tok = json.loads((checkpoint / "tokenizer.json").read_text())
    w = gguf.GGUFWriter(str(out), architecture)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    tokens = [t for t, _ in sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])]
    types = [gguf.TokenType.NORMAL] * len(tokens)
    for added in tok["added_tokens"]:
        tokens[added["id"]] = added["content"]
        types[added["id"]] = gguf.TokenType.CONTROL
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]])
    eos = cfg["eos_token_id"]
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(eos[0] if isinstance(eos, list) else eos)
    w.add_add_bos_token(True)
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    w.add_tensor("token_embd.weight", tensors["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", tensors["model.norm.weight"])
    if "lm_head.weight" in tensors and not cfg.get("tie_word_embeddings", False):
        w.add_tensor("output.weight", tensors["lm_head.weight"])
    for i in range(cfg["num_hidden_layers"]):
        for hf, name in _LAYER_NAMES.items():
            t = tensors[f"model.layers.{i}.{hf}.weight"]
            if name == "attn_q":
                t = _rotary_layout(t, heads)
            elif name == "attn_k":
                t = _rotary_layout(t, kv_heads)
            if raw_type is not None and i == 0 and name == "ffn_down":
                qtype = gguf.GGMLQuantizationType[raw_type]
                block, size = gguf.GGML_QUANT_SIZES[qtype]
                raw = np.zeros((t.shape[0], t.shape[1] // block * size), dtype=np.uint8)
                w.add_tensor(f"blk.{i}.{name}.weight", raw, raw_dtype=qtype)  # element shape from the bytes
                continue
            w.add_tensor(f"blk.{i}.{name}.weight", np.ascontiguousarray(t))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out
