// The contract between the torch bindings (ops.cpp) and the per-ISA kernels (isa_*.cpp).
//
// Every ISA file is compiled for its own instruction set (a target pragma per file) and must not
// include torch or any C++ library header with inline functions: the linker keeps one copy of
// such a function, and an AVX-512 copy would then run on a CPU without AVX-512. So this header
// holds plain data and function pointers only, and the ISA files keep their code in anonymous
// namespaces.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace ec {

enum Format : int { NVFP4 = 0, FP8 = 1, BF16 = 2 };

// One weight matrix of logical shape (N, K), read in place (a view: rows may be strided, as a
// submodel's slice of its parent or an expert's view of a memory-mapped file are).
struct WeightView {
    const uint8_t* data;   // NVFP4: two E2M1 codes a byte (N, K/2); FP8: E4M3 (N, K); BF16: (N, K) 2-byte
    int64_t stride;        // bytes from one row of `data` to the next
    const uint8_t* scales; // NVFP4: E4M3 scales (N, K/16); null otherwise
    int64_t scale_stride;  // bytes from one row of `scales` to the next
    float scale2;          // the per-matrix scale (NVFP4's scale_2, FP8's scale); 1 for BF16
};

// One ISA's kernels. "Prepared" activations are in the ISA's private layout (quantized or
// reordered); `decode` writes weight rows as fp32 in the column order `permute` gives x.
struct Isa {
    const char* name;
    // Bytes of one token's prepared activations for matvec (format `fmt`, width K).
    size_t (*prepared_bytes)(int fmt, int64_t K);
    // One token x (K floats) into the matvec layout.
    void (*prepare)(int fmt, const float* x, int64_t K, void* out);
    // out[(r - r0) * out_stride] = row r . x for rows [r0, r1), scale2 applied: one token.
    void (*matvec)(int fmt, const void* prepared, int64_t K, const WeightView* w, int64_t r0, int64_t r1,
                   float* out, int64_t out_stride);
    // Rows [r0, r1) as exact fp32 values (the reference's, bit for bit) into panel (r1 - r0, K).
    void (*decode)(int fmt, const WeightView* w, int64_t K, int64_t r0, int64_t r1, float* panel);
    // One token x (K floats) into the column order of `decode`'s panels.
    void (*permute)(int fmt, const float* x, int64_t K, float* out);
    // out[t * ldo + r] = sum_k X[t * K + k] * P[r * K + k] for t < T, r < R (fp32 throughout).
    void (*gemm)(const float* X, int64_t T, const float* P, int64_t R, int64_t K, float* out, int64_t ldo);
    // Several tokens in the matvec's arithmetic (prepared activations `xs` bytes apart, T of them):
    // out[t * ldo + (r - r0)] = row r . token t for rows [r0, r1). Null where the ISA has no rounded
    // path (portable: exact panels instead).
    void (*matmul)(int fmt, const void* prepared, int64_t xs, int64_t T, int64_t K, const WeightView* w, int64_t r0,
                   int64_t r1, float* out, int64_t ldo);
};

const Isa* isa_portable();
const Isa* isa_avx2();    // null where not compiled in (not x86-64)
const Isa* isa_avx512();  // null where not compiled in

// What this CPU can run (cpu_features.cpp).
bool cpu_has_avx2();
bool cpu_has_avx512();

}  // namespace ec
