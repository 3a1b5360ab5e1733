// The torch side of the CPU kernels: checks every tensor it is handed, reads packed weights in
// place as WeightViews (any row stride, so submodel slices and per-expert views of a mapped file
// need no copy), and runs the chosen ISA's kernels on the kernels' own workers (work_pool.h), as
// many threads as torch is set to use.
//
// Work is cut into chunks that the threads take from a shared counter, so a thread that another
// process holds back leaves its share to the others, and a call never waits for a thread that
// never started.
#include <ATen/Parallel.h>  // at::get_num_threads: torch's thread count is the kernels' too
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
#endif

#include "kernels.h"
#include "work_pool.h"

namespace {

using ec::WeightView;

constexpr int64_t MATVEC_ROWS = 64;        // rows per chunk of a one-token product
constexpr int64_t PANEL_BYTES = 192 << 10; // a decoded fp32 panel: stays in L2
constexpr int64_t TOKEN_BLOCK = 64;        // tokens per chunk of a several-token product

std::vector<const ec::Isa*> runnable() {
    std::vector<const ec::Isa*> out;
    if (ec::isa_avx512() && ec::cpu_has_avx512()) out.push_back(ec::isa_avx512());
    if (ec::isa_avx2() && ec::cpu_has_avx2()) out.push_back(ec::isa_avx2());
    out.push_back(ec::isa_portable());
    return out;
}

const ec::Isa* g_isa = nullptr;

const ec::Isa* isa() {
    if (g_isa == nullptr) g_isa = runnable()[0];
    return g_isa;
}

std::vector<std::string> isas() {
    std::vector<std::string> names;
    for (const ec::Isa* i : runnable()) names.emplace_back(i->name);
    return names;
}

void set_isa(const std::string& name) {
    for (const ec::Isa* i : runnable())
        if (name == i->name) {
            g_isa = i;
            return;
        }
    std::string can;
    for (const std::string& n : isas()) can += (can.empty() ? "" : ", ") + n;
    TORCH_CHECK(false, "this CPU cannot run the '", name, "' kernels; it runs: ", can);
}

std::string isa_name() { return isa()->name; }

// The E4M3 decode makes fp32 subnormals on purpose (see isa_x86.inc): keep them while a kernel runs.
struct KeepDenormals {
#if defined(__x86_64__) || defined(_M_X64)
    unsigned saved;
    KeepDenormals() : saved(_mm_getcsr()) { _mm_setcsr(saved & ~0x8040u); }  // DAZ and FTZ off
    ~KeepDenormals() { _mm_setcsr(saved); }
#endif
};

// f(c) for every chunk c in [0, chunks), on this thread and the kernels' workers (work_pool.h):
// torch's thread count, taken from a shared counter.
template <class F>
void for_chunks(int64_t chunks, const F& f) {
    KeepDenormals keep;
    ec::run_chunks(chunks, at::get_num_threads(), [](void* ctx, int64_t c) { (*(const F*)ctx)(c); }, (void*)&f);
}

int64_t width(int fmt, const at::Tensor& data) { return fmt == ec::NVFP4 ? 2 * data.size(-1) : data.size(-1); }

WeightView view(int fmt, const at::Tensor& data, const std::optional<at::Tensor>& scales, float scale2) {
    TORCH_CHECK(data.device().is_cpu() && data.dim() == 2, "weights must be 2-D CPU tensors");
    TORCH_CHECK(data.stride(1) == 1, "weight rows must be contiguous");
    TORCH_CHECK(data.element_size() == (fmt == ec::BF16 ? 2 : 1), "weights of the wrong element size");
    TORCH_CHECK(fmt != ec::BF16 || data.scalar_type() == at::kBFloat16, "BF16 weights must be bfloat16");
    WeightView v{(const uint8_t*)data.data_ptr(), data.stride(0) * data.element_size(), nullptr, 0, scale2};
    if (fmt == ec::NVFP4) {
        TORCH_CHECK(scales.has_value(), "NVFP4 weights need their block scales");
        const at::Tensor& s = *scales;
        TORCH_CHECK(s.device().is_cpu() && s.dim() == 2 && s.element_size() == 1 && s.stride(1) == 1,
                    "NVFP4 block scales must be 2-D one-byte CPU tensors with contiguous rows");
        TORCH_CHECK(s.size(0) == data.size(0) && s.size(1) * 16 == width(fmt, data),
                    "NVFP4 block scales do not match the weight's shape");
        v.scales = (const uint8_t*)s.data_ptr();
        v.scale_stride = s.stride(0);
    }
    return v;
}

float scale_at(const at::Tensor& s, int64_t i) {
    TORCH_CHECK(s.device().is_cpu() && s.scalar_type() == at::kFloat, "per-matrix scales must be fp32 CPU tensors");
    if (s.dim() == 0) return *s.data_ptr<float>();
    return s.data_ptr<float>()[i * s.stride(0)];
}

// Activations (J, K) as fp32 rows; an expanded input (stride 0: one input for every weight) stays one row.
at::Tensor activations(const at::Tensor& x, int64_t K) {
    TORCH_CHECK(x.device().is_cpu() && x.dim() == 2 && x.size(1) == K, "activations must be (rows, ", K, ") on the CPU");
    TORCH_CHECK(x.is_floating_point(), "activations must be floating point");
    const at::Tensor rows = x.size(0) > 0 && x.stride(0) == 0 ? x.narrow(0, 0, 1) : x;
    return rows.to(at::kFloat).contiguous();
}

// Prepared activations of X tokens (rows of x), each `*bytes` apart (a multiple of 64), 64-byte aligned.
uint8_t* prepare_all(const ec::Isa* k, int fmt, const at::Tensor& x, int64_t K, std::vector<uint8_t>& buf,
                     int64_t* bytes) {
    const int64_t X = x.size(0);
    *bytes = ((int64_t)k->prepared_bytes(fmt, K) + 63) & ~(int64_t)63;
    buf.resize((size_t)(*bytes * X + 64));
    uint8_t* base = (uint8_t*)(((uintptr_t)buf.data() + 63) & ~(uintptr_t)63);
    for (int64_t i = 0; i < X; i++) k->prepare(fmt, x.data_ptr<float>() + i * K, K, base + i * *bytes);
    return base;
}

// out[j] (N,) = views[j] . x[j or 0], one token per weight.
void matvecs(int fmt, const std::vector<WeightView>& views, const at::Tensor& x, int64_t K, int64_t N, float* out,
             bool exact) {
    const ec::Isa* k = isa();
    const int64_t J = (int64_t)views.size(), X = x.size(0);  // X is 1 for a shared input
    const float* xs = x.data_ptr<float>();
    if (!exact) {
        std::vector<uint8_t> buf;
        int64_t bytes;
        const uint8_t* base = prepare_all(k, fmt, x, K, buf, &bytes);
        const int64_t per = (N + MATVEC_ROWS - 1) / MATVEC_ROWS;
        for_chunks(J * per, [&](int64_t c) {
            const int64_t j = c / per, r0 = (c % per) * MATVEC_ROWS, r1 = std::min(N, r0 + MATVEC_ROWS);
            k->matvec(fmt, base + (X == 1 ? 0 : j) * bytes, K, &views[j], r0, r1, out + j * N + r0, 1);
        });
        return;
    }
    std::vector<float> permuted((size_t)(X * K));
    for (int64_t i = 0; i < X; i++) k->permute(fmt, xs + i * K, K, permuted.data() + i * K);
    const int64_t R = std::max<int64_t>(4, std::min<int64_t>(64, PANEL_BYTES / (4 * K)) & ~3);
    const int64_t per = (N + R - 1) / R;
    for_chunks(J * per, [&](int64_t c) {
        thread_local std::vector<float> panel;
        panel.resize((size_t)(R * K));
        const int64_t j = c / per, r0 = (c % per) * R, r1 = std::min(N, r0 + R);
        k->decode(fmt, &views[j], K, r0, r1, panel.data());
        k->gemm(permuted.data() + (X == 1 ? 0 : j) * K, 1, panel.data(), r1 - r0, K, out + j * N + r0, N);
    });
}

// out (T, N) = x (T, K) . w^T, several tokens in the one-token arithmetic (NVFP4: int8 activations):
// chunks of rows x a block of tokens, so a row's bytes come from memory once per token block.
void rounded_gemm(int fmt, const WeightView& w, const at::Tensor& x, int64_t K, int64_t N, float* out) {
    const ec::Isa* k = isa();
    const int64_t T = x.size(0);
    std::vector<uint8_t> buf;
    int64_t bytes;
    const uint8_t* base = prepare_all(k, fmt, x, K, buf, &bytes);
    const int64_t panels = (N + MATVEC_ROWS - 1) / MATVEC_ROWS, blocks = (T + TOKEN_BLOCK - 1) / TOKEN_BLOCK;
    for_chunks(panels * blocks, [&](int64_t c) {
        const int64_t r0 = (c / blocks) * MATVEC_ROWS, r1 = std::min(N, r0 + MATVEC_ROWS);
        const int64_t t0 = (c % blocks) * TOKEN_BLOCK, t1 = std::min(T, t0 + TOKEN_BLOCK);
        k->matmul(fmt, base + t0 * bytes, bytes, t1 - t0, K, &w, r0, r1, out + t0 * N + r0, N);
    });
}

// out (T, N) = x (T, K) . w^T, several tokens: exact fp32 panels times fp32 activations.
void gemm(int fmt, const WeightView& w, const at::Tensor& x, int64_t K, int64_t N, float* out) {
    const ec::Isa* k = isa();
    const int64_t T = x.size(0);
    std::vector<float> permuted((size_t)(T * K));
    for (int64_t t = 0; t < T; t++) k->permute(fmt, x.data_ptr<float>() + t * K, K, permuted.data() + t * K);
    const int64_t R = std::max<int64_t>(4, std::min<int64_t>(64, PANEL_BYTES / (4 * K)) & ~3);
    const int64_t panels = (N + R - 1) / R, blocks = (T + TOKEN_BLOCK - 1) / TOKEN_BLOCK;
    for_chunks(panels * blocks, [&](int64_t c) {
        thread_local std::vector<float> panel;
        panel.resize((size_t)(R * K));
        const int64_t r0 = (c / blocks) * R, r1 = std::min(N, r0 + R);
        const int64_t t0 = (c % blocks) * TOKEN_BLOCK, t1 = std::min(T, t0 + TOKEN_BLOCK);
        k->decode(fmt, &w, K, r0, r1, panel.data());
        k->gemm(permuted.data() + t0 * K, t1 - t0, panel.data(), r1 - r0, K, out + t0 * N + r0, N);
    });
}

void check_format(int64_t fmt) { TORCH_CHECK(fmt >= ec::NVFP4 && fmt <= ec::BF16, "unknown weight format ", fmt); }

// x (T, K) @ w.T as fp32 (T, N). One token takes the matvec path unless `exact`; several NVFP4 ones
// its arithmetic too (int8 activations) where the ISA has it, else exact panels.
at::Tensor linear(const at::Tensor& x, int64_t fmt, const at::Tensor& data, const std::optional<at::Tensor>& scales,
                  const at::Tensor& scale2, bool exact) {
    check_format(fmt);
    const int64_t K = width((int)fmt, data), N = data.size(0);
    const WeightView w = view((int)fmt, data, scales, fmt == ec::BF16 ? 1.f : scale_at(scale2, 0));
    TORCH_CHECK(x.dim() == 2 && x.size(1) == K, "activations must be (tokens, ", K, ")");
    const at::Tensor xf = x.to(at::kFloat).contiguous();
    at::Tensor out = at::empty({x.size(0), N}, x.options().dtype(at::kFloat));
    if (x.size(0) == 0 || N == 0) return out;
    if (x.size(0) == 1)
        matvecs((int)fmt, {w}, xf, K, N, out.data_ptr<float>(), exact);
    else if (fmt == ec::NVFP4 && !exact && isa()->matmul != nullptr)
        rounded_gemm((int)fmt, w, xf, K, N, out.data_ptr<float>());
    else
        gemm((int)fmt, w, xf, K, N, out.data_ptr<float>());
    return out;
}

// One token per weight: out[j] = x[j] . weight j, for weights given as lists of views (the
// chosen experts' per-expert views). x (J, K), or (J, K) expanded from one row.
at::Tensor matvecs_list(const at::Tensor& x, int64_t fmt, const std::vector<at::Tensor>& datas,
                        const std::vector<at::Tensor>& scales, const at::Tensor& scale2, bool exact) {
    check_format(fmt);
    TORCH_CHECK(!datas.empty(), "no weights");
    TORCH_CHECK(fmt != ec::NVFP4 || scales.size() == datas.size(), "one block-scale tensor per NVFP4 weight");
    const int64_t K = width((int)fmt, datas[0]), N = datas[0].size(0), J = (int64_t)datas.size();
    TORCH_CHECK(x.size(0) == J, "one activation row per weight");
    std::vector<WeightView> views;
    for (int64_t j = 0; j < J; j++) {
        TORCH_CHECK(datas[j].dim() == 2 && datas[j].size(0) == N && width((int)fmt, datas[j]) == K,
                    "the weights differ in shape");
        std::optional<at::Tensor> s = fmt == ec::NVFP4 ? std::optional<at::Tensor>(scales[j]) : std::nullopt;
        views.push_back(view((int)fmt, datas[j], s, fmt == ec::BF16 ? 1.f : scale_at(scale2, j)));
    }
    const at::Tensor xf = activations(x, K);
    at::Tensor out = at::empty({J, N}, x.options().dtype(at::kFloat));
    matvecs((int)fmt, views, xf, K, N, out.data_ptr<float>(), exact);
    return out;
}

// The same for stacked weights (E, N, ...): weight j is expert ids[j].
at::Tensor matvecs_stacked(const at::Tensor& x, int64_t fmt, const at::Tensor& data,
                           const std::optional<at::Tensor>& scales, const at::Tensor& scale2, const at::Tensor& ids,
                           bool exact) {
    check_format(fmt);
    TORCH_CHECK(data.dim() == 3, "stacked weights must be (experts, rows, columns)");
    TORCH_CHECK(ids.device().is_cpu() && ids.dim() == 1 && ids.scalar_type() == at::kLong, "ids must be a 1-D int64 CPU tensor");
    const int64_t E = data.size(0), J = ids.size(0);
    TORCH_CHECK(!scales.has_value() || (scales->dim() == 3 && scales->size(0) == E), "stacked scales do not match");
    std::vector<at::Tensor> datas, scale_list;
    const int64_t* id = ids.data_ptr<int64_t>();
    for (int64_t j = 0; j < J; j++) {
        TORCH_CHECK(id[j * ids.stride(0)] >= 0 && id[j * ids.stride(0)] < E, "expert id out of range");
        datas.push_back(data.select(0, id[j * ids.stride(0)]));
        if (scales.has_value()) scale_list.push_back(scales->select(0, id[j * ids.stride(0)]));
    }
    at::Tensor s2 = fmt == ec::BF16 ? scale2 : scale2.index_select(0, ids);
    return matvecs_list(x, fmt, datas, scale_list, s2, exact);
}

// One decode step of a Mamba-2 layer's state, in one pass over it (PyTorch's ops read and write
// the 2 MB state of a real layer five times, through temporaries): for head h of group g = h % G,
//     state[h] = state[h] * exp(dt[h] * A[h]) + (dt[h] * x[h]) outer B[g]
//     y[h] = state[h] . C[g] + D[h] * x[h]
// state (H, P, N), x (H, P), dt A D (H,), B C (G, N), all fp32; returns y (H, P).
at::Tensor ssm_step(const at::Tensor& state, const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                    const at::Tensor& B, const at::Tensor& C, const at::Tensor& D) {
    for (const at::Tensor* t : {&state, &x, &dt, &A, &B, &C, &D})
        TORCH_CHECK(t->device().is_cpu() && t->scalar_type() == at::kFloat && t->is_contiguous(),
                    "the state step takes contiguous fp32 CPU tensors");
    const int64_t H = state.size(0), P = state.size(1), N = state.size(2), G = B.size(0);
    TORCH_CHECK(x.numel() == H * P && dt.numel() == H && A.numel() == H && D.numel() == H && B.numel() == G * N &&
                    C.numel() == G * N && H % G == 0, "the state step's shapes do not match");
    at::Tensor y = at::empty({H, P}, x.options());
    float* s = state.data_ptr<float>();
    const float *xs = x.data_ptr<float>(), *dts = dt.data_ptr<float>(), *as = A.data_ptr<float>();
    const float *bs = B.data_ptr<float>(), *cs = C.data_ptr<float>(), *ds = D.data_ptr<float>();
    float* ys = y.data_ptr<float>();
    for_chunks(H, [&](int64_t h) {
        const float decay = std::exp(dts[h] * as[h]);
        const float* b = bs + (h % G) * N;
        const float* c = cs + (h % G) * N;
        for (int64_t p = 0; p < P; p++) {
            float* row = s + (h * P + p) * N;
            const float xv = dts[h] * xs[h * P + p];
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // eight sums: lets the compiler vectorize
            int64_t n = 0;
            for (; n + 8 <= N; n += 8)
                for (int i = 0; i < 8; i++) {
                    row[n + i] = row[n + i] * decay + xv * b[n + i];
                    acc[i] += row[n + i] * c[n + i];
                }
            float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
            for (; n < N; n++) {
                row[n] = row[n] * decay + xv * b[n];
                sum += row[n] * c[n];
            }
            ys[h * P + p] = sum + ds[h] * xs[h * P + p];
        }
    });
    return y;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "Elastic Chat's CPU kernels for packed (NVFP4, FP8) and BF16 weights";
    m.def("isas", &isas, "the kernel paths this CPU runs, best first");
    m.def("isa", &isa_name, "the path in use");
    m.def("set_isa", &set_isa, "use another path this CPU runs (tests, benchmarks)");
    m.def("linear", &linear, "x (T, K) @ w.T -> (T, N) fp32");
    m.def("matvecs", &matvecs_list, "one token per weight, weights as lists of views -> (J, N) fp32");
    m.def("ssm_step", &ssm_step, "one decode step of a Mamba-2 state, in place; returns y (H, P)");
    m.def("matvecs_stacked", &matvecs_stacked, "one token per weight, experts of stacked weights -> (J, N) fp32");
}
