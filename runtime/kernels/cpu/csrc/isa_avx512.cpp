// The AVX-512 kernels: AVX2 code with VNNI byte dot products (vpdpbusd) on 256-bit vectors, which
// AVX512-VNNI with AVX512-VL provides (Intel since Cascade Lake, AMD since Zen 4). See isa_x86.inc.
#include "kernels.h"

#if defined(__x86_64__) || defined(_M_X64)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")
#endif

#define EC_VNNI 1
#include "isa_x86.inc"

namespace ec {
namespace {
const Isa AVX512 = {"avx512", prepared_bytes, prepare, matvec, decode, permute, gemm, matmul};
}
}  // namespace ec

#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

namespace ec {
const Isa* isa_avx512() { return &AVX512; }
}  // namespace ec

#else

namespace ec {
const Isa* isa_avx512() { return nullptr; }
}  // namespace ec

#endif
