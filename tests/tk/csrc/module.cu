// compile-check: module mk_tk_tests
// module.cu: the pybind11 module exposing one small test kernel per csrc/tk primitive. Functions
// take raw device pointers (tensor.data_ptr()) and sizes, launch, synchronise and check errors.
#include "common.cuh"

PYBIND11_MODULE(mk_tk_tests, m) {
  m.doc() = "GPU unit-test kernels for csrc/tk and tests/tk/csrc (see tests/tk/test_tk_*.py)";
  mk::tk_tests::register_sync(m);
  mk::tk_tests::register_tma(m);
  mk::tk_tests::register_tiles(m);
  mk::tk_tests::register_math(m);
}
