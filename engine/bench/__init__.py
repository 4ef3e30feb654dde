"""`megakernel bench`: decode benchmark of the engine against PyTorch baselines and the copy floor, batch 1 or N
sequences at once (`--batch N`).

Modules: timing (device timer), bandwidth (copy bandwidth), floor (bytes-per-token floor),
static_llama (graph-capturable PyTorch decode model), baselines (eager / CUDA graph / compile+graph),
harness (`run_bench`), report (table + JSON), cli (`register(subparsers)`).
"""
