"""The launch fields a tensor-parallel rank passes (engine/cuda/tp_peers.py) are the ones the kernel's launch reads
(csrc/interpreter/interpreter.cu globals_from_dict), and each names a Globals member (csrc/interpreter/globals.cuh)."""
from __future__ import annotations

import re
from pathlib import Path

import torch

from engine.cuda.tp_peers import TpPeers

CSRC = Path(__file__).resolve().parents[2] / "csrc" / "interpreter"


def _peers() -> TpPeers:
    peers = object.__new__(TpPeers)  # the fields only: no GPU memory
    peers.rank, peers.world, peers.slot_tokens, peers.ll_tokens = 1, 2, 64, 16
    peers.send_ptrs = peers.flag_ptrs = peers.recv_ptrs = peers.best_ptrs = torch.zeros(2, dtype=torch.int64)
    return peers


def test_every_field_is_read_by_the_launch_and_is_a_globals_member() -> None:
    launch = (CSRC / "interpreter.cu").read_text()
    read = set(re.findall(r'"(tp_\w+)"', launch))
    members = set(re.findall(r"\b(tp_\w+);", (CSRC / "globals.cuh").read_text()))
    fields = set(_peers().fields())
    assert fields == read
    assert fields <= members
