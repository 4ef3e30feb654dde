"""Turn the kernel's error record into an exception that names the stuck instruction."""
from __future__ import annotations

import numpy as np

from engine.instructions import registry as op
from engine.scheduler.compiler.step_builder_cache import CompiledStream

KINDS = {1: "dependency wait timed out (watchdog)", 2: "unknown opcode", 3: "intra-SM pipeline wait timed out",
         4: "dynamic queue claim before this launch's queue (queue head / epoch out of step)",
         5: "instruction outside its kernel variant's paths (engine/cuda/variant.py picked it wrongly)",
         6: "instruction of several token groups streams more weight pages (observed) than the ring holds (target): "
            "engine/cuda/limits.py fit_stream let it through",
         7: "tensor-parallel exchange (TP_ALLREDUCE, TP_ARGMAX): a peer rank never published (watchdog); counter = "
            "the peer rank, target = the count awaited (on the push path and TP_ARGMAX: the tag), observed = its "
            "count (the tag seen)",
         -1: "error record incomplete"}
ERR_TP_PEER_TIMEOUT = 7  # csrc/interpreter/opcodes.cuh


SITES = {1: "the controller's wait for a free instruction slot", 2: "the loader's wait for the next instruction",
         3: "the loader's wait for a free weight page", 4: "the consumers' wait for the next instruction",
         5: "a consumer warp's wait for a loaded weight page",
         6: "a consumer warp's wait for the loader to issue a weight page",
         7: "the loader's wait for an earlier page copy to land (in-flight cap)"}


class MegakernelError(RuntimeError):
    """The megakernel stopped on a device-side failure; the message names the instruction."""


def describe_failure(err: list[int], cs: CompiledStream) -> str:
    kind, instr_id, opcode, counter, target, observed, block, layer = err[:8]
    what = KINDS.get(kind, f"error kind {kind}")
    try:
        name = op.Opcode(opcode).name
    except ValueError:
        name = f"opcode {opcode}"
    operands = ""
    if 0 <= instr_id < len(cs.stream.instrs):
        operands = f" {cs.stream.instrs[instr_id]}"
    msg = f"megakernel: {what}: instruction #{instr_id} {name} (layer {layer}) on block {block}{operands}"
    if kind == ERR_TP_PEER_TIMEOUT:  # TP_ALLREDUCE's / TP_ARGMAX's words: a rank, or -1 for a step too large
        if counter >= 0:
            msg += (f"; waited for rank {counter} to publish count (or push tag) {target}, it stayed at {observed} "
                    "(a rank that stopped, or ranks running different steps)")
        else:
            msg += f"; step of {observed} tokens (TP_ARGMAX: sequences), the exchange buffers hold {target}"
    elif counter >= 0:
        names = cs.stream.counter_names
        cname = names[counter] if counter < len(names) else "?"
        msg += f"; waited for counter {counter} ({cname}) to reach {target}, it stayed at {observed}"
    if len(err) > 12 and err[8]:
        site = SITES.get(err[8], f"site {err[8]}")
        msg += (f"; block {err[9]} was stuck in {site} (pipeline position {err[10]}, parity {err[11]}, "
                f"instruction #{err[12]}, raw mbarrier word 0x{(err[14] & 0xffffffff):08x}{(err[13] & 0xffffffff):08x})")
    return msg


def diagnose_root_cause(words: np.ndarray, counter_names: list[str], period: list[int], reached: list[int]) -> str:
    """The topologically first instruction that explains a stalled step, from the program that ran
    (`words` [N, 32], any order) and this step's counter values (`reached[c]`, relative to the step
    start): a wait no signal can satisfy, or an instruction whose waits were all met but whose signal
    never came (stuck for another reason)."""
    rows = words.reshape(-1, words.shape[-1])
    rows = rows[rows[:, 0] != 0]
    rows = rows[np.argsort(rows[:, 1], kind="stable")]  # instruction id = topological order
    waits = [[(int(w[17 + 2 * k]), int(w[18 + 2 * k])) for k in range(int(w[16]))] for w in rows]
    for w, wl in zip(rows, waits):
        unmet = [(c, t) for c, t in wl if reached[c] < t]
        if unmet and all(t > period[c] for c, t in unmet):
            c, t = unmet[0]
            return (f"root cause: instruction #{int(w[1])} {_opcode_name(int(w[0]))} waits for counter {c} "
                    f"({counter_names[c]}) to reach {t}, but only {period[c]} signals exist per step")
    for w, wl in zip(rows, waits):
        sig = int(w[27])
        if sig >= 0 and reached[sig] < period[sig] and all(reached[c] >= t for c, t in wl):
            ready = [int(r[1]) for r, rl in zip(rows, waits)
                     if int(r[27]) == sig and all(reached[c] >= t for c, t in rl)]
            return (f"root cause: counter {sig} ({counter_names[sig]}) reached {reached[sig]}/{period[sig]} although "
                    f"its signallers' dependencies were met; one of instructions {ready[:6]} "
                    f"({_opcode_name(int(w[0]))}, layer {int(w[2])}) never finished")
    return ""


def _opcode_name(code: int) -> str:
    try:
        return op.Opcode(code).name
    except ValueError:
        return f"opcode {code}"
