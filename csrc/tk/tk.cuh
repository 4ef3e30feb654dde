// tk.cuh: umbrella header for mk::tk, our small tile layer (see each header for its concept).
#pragma once

#include "util.cuh"
#include "alloc.cuh"
#include "mbarrier.cuh"
#include "atomics.cuh"
#include "tma.cuh"
#include "tensor_map.cuh"
#include "st.cuh"
#include "sv.cuh"
#include "rt.cuh"
#include "rv.cuh"
#include "rt_ops.cuh"
#include "load_store.cuh"
#include "reduce.cuh"
#include "mma.cuh"
#include "matvec.cuh"
#include "warpgroup.cuh"
