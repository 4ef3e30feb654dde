"""Reference Llama (the oracle every backend is checked against).

config (LlamaConfig from HF config.json) · presets (tiny, llama-3.2-1b/3b, llama-3.1-8b/70b) ·
weights (LlamaWeights + safetensors loader) · kv_cache (PagedKVCache) · step_batch (StepBatch) ·
rope · model (LlamaModel.forward over a paged cache) · tokenizer (local AutoTokenizer + chat template) ·
tokenizer_builder + init_random (offline random HF-layout checkpoints).
"""
