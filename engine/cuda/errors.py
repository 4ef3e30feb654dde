"""Turn the kernel's error record into an exception that names the stuck instruction."""
from __future__ import annotations

from engine.instructions import opcodes as op
from engine.scheduler.step_builder_cache import CompiledStream

KINDS = {1: "dependency wait timed out (watchdog)", 2: "unknown opcode", 3: "intra-SM pipeline wait timed out",
         -1: "error record incomplete"}


SITES = {1: "the controller's wait for a free instruction slot", 2: "the loader's wait for the next instruction",
         3: "the loader's wait for a free weight page", 4: "the consumers' wait for the next instruction",
         5: "a consumer warp's wait for a loaded weight page"}


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
    if counter >= 0:
        names = cs.stream.counter_names
        cname = names[counter] if counter < len(names) else "?"
        msg += f"; waited for counter {counter} ({cname}) to reach {target}, it stayed at {observed}"
    if len(err) > 12 and err[8]:
        site = SITES.get(err[8], f"site {err[8]}")
        msg += (f"; block {err[9]} was stuck in {site} (pipeline position {err[10]}, parity {err[11]}, "
                f"instruction #{err[12]})")
    return msg
