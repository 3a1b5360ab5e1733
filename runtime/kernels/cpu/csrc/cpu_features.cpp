// What this CPU and its operating system can run, from cpuid and xgetbv (the OS must save the
// vector registers' state: XCR0), so dispatch never picks a path the machine would fault on.
#include "kernels.h"

#if defined(__x86_64__) || defined(_M_X64)
#if defined(_MSC_VER)
#include <immintrin.h>
#include <intrin.h>
#else
#include <cpuid.h>
#endif

namespace ec {
namespace {

void cpuid(int leaf, int sub, unsigned r[4]) {
#if defined(_MSC_VER)
    int v[4];
    __cpuidex(v, leaf, sub);
    for (int i = 0; i < 4; i++) r[i] = (unsigned)v[i];
#else
    __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
#endif
}

unsigned long long xcr0() {
#if defined(_MSC_VER)
    return _xgetbv(0);
#else
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
#endif
}

struct Features {
    bool avx2 = false, avx512 = false;
    Features() {
        unsigned r[4];
        cpuid(0, 0, r);
        const unsigned max_leaf = r[0];
        cpuid(1, 0, r);
        const bool fma = r[2] & (1u << 12), osxsave = r[2] & (1u << 27), avx = r[2] & (1u << 28);
        if (!(osxsave && avx) || max_leaf < 7) return;
        const unsigned long long xcr = xcr0();
        const bool ymm = (xcr & 0x6) == 0x6, zmm = (xcr & 0xE6) == 0xE6;
        cpuid(7, 0, r);
        const bool avx2_bit = r[1] & (1u << 5);
        const bool f = r[1] & (1u << 16), bw = r[1] & (1u << 30), vl = r[1] & (1u << 31), vnni = r[2] & (1u << 11);
        avx2 = ymm && avx2_bit && fma;
        avx512 = avx2 && zmm && f && bw && vl && vnni;
    }
};

const Features& features() {
    static const Features f;
    return f;
}

}  // namespace

bool cpu_has_avx2() { return features().avx2; }
bool cpu_has_avx512() { return features().avx512; }

}  // namespace ec

#else

namespace ec {
bool cpu_has_avx2() { return false; }
bool cpu_has_avx512() { return false; }
}  // namespace ec

#endif
