"""`--kernel-option NAME=VALUE` as a flag (bench, profile, generate, serve): argparse only, so building a parser
imports no torch; the values are parsed and checked by engine/cuda/backend_options.py."""
from __future__ import annotations

import argparse


def add_kernel_option_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kernel-option", action="append", default=[], metavar="NAME=VALUE",
                        help="a cuda backend option (KernelOptions / SplitParams field or policy, waves, num_sms, "
                             "pad_steps, timeout_ns; flags take 0 or 1); repeatable; the engine's defaults otherwise")
