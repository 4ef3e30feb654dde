"""Greedy chat answers to a few factual questions with bf16 and with fp8 weights (and fp8 KV), side by side, through
the public API (`LLM.chat`): the fp8 issue's "answers unchanged in substance" check on a real checkpoint.

    python -m dev.fp8_chat_check --model ~/.cache/megakernel/models/SmolLM2-135M-Instruct [--backend torch]
        [--settings none,fp8,fp8/fp8] [--max-tokens 40] [--json out.json]

A setting is WEIGHTS[/KV], as in dev/perplexity.py. Prints each question's answers, one per setting, and whether
each is identical to the first setting's; the JSON keeps them all."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from engine import LLM, SamplingParams

QUESTIONS = (
    "What is the capital of France?",
    "How many days are there in a week?",
    "What is the chemical symbol for water?",
    "Who wrote the play Romeo and Juliet?",
    "What planet is closest to the Sun?",
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--backend", default="torch")
    ap.add_argument("--settings", default="none,fp8,fp8/fp8", help="comma-separated WEIGHTS[/KV]")
    ap.add_argument("--max-tokens", type=int, default=40)
    ap.add_argument("--quantization-skip", default="", help="comma list kept unquantised in the fp8 settings (lm_head)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    answers: dict[str, list[str]] = {}
    for setting in args.settings.split(","):
        weights, _, kv = setting.partition("/")
        skip = tuple(s for s in args.quantization_skip.split(",") if s) if weights != "none" else ()
        llm = LLM(args.model, backend=args.backend, quantization=None if weights == "none" else weights,
                  quantization_skip=skip, kv_cache_dtype=kv or "auto", progress=False)
        outs = llm.chat([[{"role": "user", "content": q}] for q in QUESTIONS], params)
        answers[setting] = [o.outputs[0].text.strip() for o in outs]
    first = next(iter(answers))
    for i, q in enumerate(QUESTIONS):
        print(f"Q: {q}")
        for setting, texts in answers.items():
            same = "same" if texts[i] == answers[first][i] else "differs"
            print(f"  {setting:9s} [{same}] {texts[i]!r}")
    if args.json:
        args.json.write_text(json.dumps({"model": args.model, "backend": args.backend, "max_tokens": args.max_tokens,
                                         "quantization_skip": args.quantization_skip, "questions": list(QUESTIONS),
                                         "answers": answers}, indent=1))


if __name__ == "__main__":
    main()
