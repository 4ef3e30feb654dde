// ops/noop.cuh: NOOP (engine/instructions/ops/noop.py), opcode 0 in every table: the padding of static queues,
// and their end. It is never dispatched, so it has no Op<OP_NOOP> and no case in ops/dispatch.cuh: the controller
// stops fetching at a queue's first NOOP and leaves a NOOP slot, at which the loader and the consumers leave
// too (roles.cuh, consumer.cuh), all through ends_queue. It streams nothing.
#pragma once

#include "../opcodes.cuh"

namespace mk::vm {

// Whether instruction record or slot w ends its queue.
__device__ __forceinline__ bool ends_queue(const int* w) { return w[W_OPCODE] == OP_NOOP; }

}  // namespace mk::vm
