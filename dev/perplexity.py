"""Perplexity of a fixed English passage through the public API (`LLM.generate` with prompt_logprobs), per weight
quantization, in one run: the fp8 issue's accuracy check on a real checkpoint.

    python -m dev.perplexity --model ~/.cache/megakernel/models/SmolLM2-135M-Instruct [--backend torch]
        [--settings none,fp8,fp8/fp8] [--quantization-skip lm_head] [--file dev/data/english_passage.txt]
        [--json out.json]

A setting is WEIGHTS[/KV]: the weights' quantization (none, fp8) and the KV cache's dtype (auto, fp8).

The default passage (dev/data/english_passage.txt, 2 227 SmolLM2 tokens) is the Apache License 2.0 followed by
NumPy's BSD-3-Clause license, each paragraph on one line. Every prompt token after the first is scored (teacher
forced); perplexity = exp(-mean logprob). One line per setting, and the ratio to the first."""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from engine import LLM, SamplingParams

PASSAGE = Path(__file__).resolve().parent / "data" / "english_passage.txt"


def perplexity(llm: LLM, ids: list[int]) -> float:
    out = llm.generate({"prompt_token_ids": ids}, SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0))[0]
    assert out.prompt_logprobs is not None
    lps = [entry[tok] for tok, entry in zip(ids[1:], out.prompt_logprobs[1:])]  # type: ignore[index]
    return math.exp(-sum(lps) / len(lps))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--backend", default="torch")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--settings", default="none,fp8,fp8/fp8", help="comma-separated WEIGHTS[/KV] (see above)")
    ap.add_argument("--file", type=Path, default=PASSAGE)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--quantization-skip", default="", help="comma list kept unquantised in the fp8 settings (lm_head)")
    args = ap.parse_args()
    text = args.file.read_text()
    rows = []
    for setting in args.settings.split(","):
        weights, _, kv = setting.partition("/")
        start = time.perf_counter()
        skip = tuple(s for s in args.quantization_skip.split(",") if s) if weights != "none" else ()
        llm = LLM(args.model, backend=args.backend, dtype=args.dtype, quantization=None if weights == "none" else weights,
                  quantization_skip=skip, kv_cache_dtype=kv or "auto", progress=False, max_num_seqs=1)
        ids = llm.get_tokenizer()(text)["input_ids"]
        ppl = perplexity(llm, ids)
        rows.append({"quantization": weights, "kv_cache_dtype": kv or "auto", "tokens": len(ids), "perplexity": ppl,
                     "seconds": time.perf_counter() - start})
        ratio = ppl / rows[0]["perplexity"]
        print(f"{setting:9s} {len(ids)} tokens  perplexity {ppl:.4f}  ({ratio:.4f}x {args.settings.split(',')[0]})",
              flush=True)
    if args.json:
        args.json.write_text(json.dumps({"model": args.model, "backend": args.backend, "dtype": args.dtype,
                                         "quantization_skip": args.quantization_skip,
                                         "file": str(args.file), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
