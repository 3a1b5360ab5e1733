// The portable kernels: plain C++ for any CPU (the compiler vectorizes what it can for the
// baseline ISA). Exact: every weight is decoded to the reference's fp32 value, activations are
// not rounded. Also the slow, obviously right model the x86 kernels are checked against.
#include <math.h>
#include <string.h>

#include "kernels.h"

namespace ec {
namespace {

const float E2M1[16] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -0.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};

float e4m3(uint8_t b) {
    int e = (b >> 3) & 0xF, m = b & 7;
    if (e == 15 && m == 7) return NAN;  // 0x7F and 0xFF: the format's only NaNs (no infinities)
    float v = e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8 + m), e - 10);
    return (b & 0x80) ? -v : v;
}

float bf16(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

// Columns [k0, k1) of row r as fp32 values (k0, k1 multiples of 16 for NVFP4): NVFP4 as ModelOpt
// computes them, e2m1 * (block scale * scale2); FP8 e4m3 * scale; BF16 as stored.
void decode_cols(int fmt, const WeightView* w, int64_t r, int64_t k0, int64_t k1, float* out) {
    const uint8_t* row = w->data + r * w->stride;
    if (fmt == NVFP4) {
        const uint8_t* sc = w->scales + r * w->scale_stride;
        for (int64_t b = k0 / 16; b < k1 / 16; b++) {
            float s = e4m3(sc[b]) * w->scale2;
            for (int i = 0; i < 8; i++) {
                uint8_t byte = row[b * 8 + i];
                out[b * 16 - k0 + 2 * i] = E2M1[byte & 0xF] * s;
                out[b * 16 - k0 + 2 * i + 1] = E2M1[byte >> 4] * s;
            }
        }
    } else if (fmt == FP8) {
        for (int64_t k = k0; k < k1; k++) out[k - k0] = e4m3(row[k]) * w->scale2;
    } else {
        const uint16_t* h = (const uint16_t*)row;
        for (int64_t k = k0; k < k1; k++) out[k - k0] = bf16(h[k]);
    }
}

size_t prepared_bytes(int, int64_t K) { return (size_t)K * sizeof(float); }

void prepare(int, const float* x, int64_t K, void* out) { memcpy(out, x, (size_t)K * sizeof(float)); }

void permute(int, const float* x, int64_t K, float* out) { memcpy(out, x, (size_t)K * sizeof(float)); }

float dot(const float* a, const float* b, int64_t K) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // eight sums: lets the compiler vectorize
    int64_t k = 0;
    for (; k + 8 <= K; k += 8)
        for (int i = 0; i < 8; i++) acc[i] += a[k + i] * b[k + i];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; k < K; k++) s += a[k] * b[k];
    return s;
}

void matvec(int fmt, const void* prepared, int64_t K, const WeightView* w, int64_t r0, int64_t r1, float* out,
            int64_t out_stride) {
    const float* x = (const float*)prepared;
    float part[256];  // a piece of the row at a time: any width, no allocation
    for (int64_t r = r0; r < r1; r++) {
        float s = 0;
        for (int64_t k = 0; k < K; k += 256) {
            int64_t n = K - k < 256 ? K - k : 256;
            decode_cols(fmt, w, r, k, k + n, part);
            s += dot(part, x + k, n);
        }
        out[(r - r0) * out_stride] = s;
    }
}

void decode(int fmt, const WeightView* w, int64_t K, int64_t r0, int64_t r1, float* panel) {
    for (int64_t r = r0; r < r1; r++) decode_cols(fmt, w, r, 0, K, panel + (r - r0) * K);
}

void gemm(const float* X, int64_t T, const float* P, int64_t R, int64_t K, float* out, int64_t ldo) {
    for (int64_t t = 0; t < T; t++)
        for (int64_t r = 0; r < R; r++) out[t * ldo + r] = dot(X + t * K, P + r * K, K);
}

const Isa PORTABLE = {"portable", prepared_bytes, prepare, matvec, decode, permute, gemm, nullptr};

}  // namespace

const Isa* isa_portable() { return &PORTABLE; }

}  // namespace ec
