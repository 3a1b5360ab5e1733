// The AVX2 + FMA kernels (x86-64 CPUs since about 2013-2015). See isa_x86.inc.
#include "kernels.h"

#if defined(__x86_64__) || defined(_M_X64)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

#define EC_VNNI 0
#include "isa_x86.inc"

namespace ec {
namespace {
const Isa AVX2 = {"avx2", prepared_bytes, prepare, matvec, decode, permute, gemm, matmul};
}
}  // namespace ec

#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

namespace ec {
const Isa* isa_avx2() { return &AVX2; }
}  // namespace ec

#else

namespace ec {
const Isa* isa_avx2() { return nullptr; }
}  // namespace ec

#endif
