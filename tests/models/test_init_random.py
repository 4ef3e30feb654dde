"""Random checkpoints: write the tiny preset (single file and sharded), load config, weights and
tokenizer back, run the model on a chat prompt; the full-size tokenizer loads fast and covers the vocab."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from llama_testlib import PagedRunner, fresh_seed

from models.llama.config import LlamaConfig
from models.llama.init_random import init_random_checkpoint, main, with_tokenizer_ids
from models.llama.presets import preset_config
from models.llama.tokenizer import apply_chat_template, load_tokenizer
from models.llama.tokenizer_builder import write_tokenizer
from models.llama.weights import INDEX_FILE, SINGLE_FILE, load_weights, to_state_dict


@pytest.mark.parametrize("max_shard_bytes", [2 * 1000**3, 600_000])
def test_tiny_round_trip(tmp_path: Path, max_shard_bytes: int) -> None:
    seed = fresh_seed()
    out = init_random_checkpoint("tiny", tmp_path / "tiny", seed=seed, max_shard_bytes=max_shard_bytes,
                                 progress=False)
    sharded = max_shard_bytes < 10**6
    assert (out / INDEX_FILE).is_file() == sharded and (out / SINGLE_FILE).is_file() != sharded
    if sharded:
        assert len(list(out.glob("model-*-of-*.safetensors"))) > 1
    cfg = LlamaConfig.from_dir(out)
    assert cfg == preset_config("tiny")
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen["bos_token_id"] == cfg.bos_token_id and tuple(gen["eos_token_id"]) == cfg.eos_token_ids

    w = load_weights(out, cfg, dtype=torch.float32, progress=False)
    assert w.lm_head is w.embed_tokens
    assert 0.015 < float(w.layers[0].gate_proj.std()) < 0.025
    assert abs(float(w.norm.mean()) - 1.0) < 0.05 and float(w.norm.std()) > 0.01

    tok = load_tokenizer(out)
    assert len(tok) == cfg.vocab_size
    assert tok.bos_token_id == cfg.bos_token_id
    assert tok.convert_tokens_to_ids("<|eot_id|>") in cfg.eos_token_ids
    assert tok.convert_tokens_to_ids("<|end_of_text|>") == cfg.eos_token_ids[0]
    assert all(tok.decode([i]) != "" for i in range(cfg.vocab_size)), "every id must decode"
    ids = apply_chat_template(tok, [{"role": "user", "content": "Hello there!"}])
    assert ids[0] == cfg.bos_token_id and ids.count(cfg.bos_token_id) == 1
    text = tok.decode(ids)
    assert text.startswith("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello there!<|eot_id|>")
    assert text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")

    g = torch.Generator().manual_seed(seed)
    runner = PagedRunner(w, len(ids) + 3, 1, g)
    nxt = int(runner.step({0: ids})[0].argmax())
    for _ in range(2):
        nxt = int(runner.step({0: [nxt]})[0].argmax())
    assert 0 <= nxt < cfg.vocab_size


def test_same_seed_same_weights_different_seed_differs(tmp_path: Path) -> None:
    cfg = preset_config("tiny")
    a = init_random_checkpoint("tiny", tmp_path / "a", seed=3, progress=False)
    a2 = init_random_checkpoint(cfg, tmp_path / "a2", seed=3, max_shard_bytes=500_000, progress=False)
    c = init_random_checkpoint(cfg, tmp_path / "c", seed=4, progress=False)
    sa, sa2, sc = (to_state_dict(load_weights(p, cfg, torch.float32, progress=False)) for p in (a, a2, c))
    assert all(torch.equal(sa[k], sa2[k]) for k in sa), "same seed must give the same weights, sharded or not"
    assert not torch.equal(sa["model.embed_tokens.weight"], sc["model.embed_tokens.weight"])


def test_custom_config_gets_tokenizer_special_ids(tmp_path: Path) -> None:
    custom = LlamaConfig(vocab_size=700, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=1, head_dim=16, tie_word_embeddings=False)
    out = init_random_checkpoint(custom, tmp_path, progress=False)
    cfg = LlamaConfig.from_dir(out)
    assert cfg == with_tokenizer_ids(custom) and cfg.bos_token_id == 700 - 16
    assert len(load_tokenizer(out)) == 700
    load_weights(out, cfg, progress=False)


def test_cli_main(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--preset", "tiny", "--out", str(tmp_path), "--seed", "1", "--dtype", "float16"]) == 0
    assert "tiny" in capsys.readouterr().out
    w = load_weights(tmp_path, LlamaConfig.from_dir(tmp_path), dtype=torch.float16, progress=False)
    assert w.dtype == torch.float16


def test_full_size_tokenizer_loads_fast_and_covers_vocab(tmp_path: Path) -> None:
    cfg = preset_config("llama-3.2-1b")
    write_tokenizer(tmp_path, cfg.vocab_size, cfg.max_position_embeddings)
    # CPU time, not wall time: other test processes share this machine's cores.
    t0 = time.process_time()
    tok = load_tokenizer(tmp_path)
    assert time.process_time() - t0 < 3.0
    assert len(tok) == cfg.vocab_size
    assert tok.bos_token_id == 128000 and tok.convert_tokens_to_ids("<|eot_id|>") == 128009
    assert tok.convert_tokens_to_ids(["<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>"]) == \
        [128006, 128007, 128008]
    assert None not in tok.convert_ids_to_tokens(list(range(cfg.vocab_size)))
    text = "The quick brown fox, naïvely 42!"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_load_tokenizer_errors_name_the_dir(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="missing"):
        load_tokenizer(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        load_tokenizer(tmp_path)
