"""`megakernel bench`: decode benchmark of the engine against PyTorch baselines (batch 1), and of the product path
with N requests at once (`--batch N`).

Modules: timing (device timer), bandwidth (copy bandwidth), floor (bytes-per-token floor),
static_llama (graph-capturable PyTorch decode model), baselines (eager / CUDA graph / compile+graph),
harness (`run_bench`), report (table + JSON), cli (`register(subparsers)`).
"""
