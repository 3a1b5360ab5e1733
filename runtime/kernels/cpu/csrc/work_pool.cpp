// The CPU kernels' worker threads: see work_pool.h for why they are not OpenMP's.
//
// One job at a time (the caller holds Python's lock, so calls never overlap). Its chunks are
// claimed by compare-and-swap on one 64-bit word holding the job's generation, its chunk count
// and the next chunk, so a worker that read the word of a finished job can never claim a chunk
// of the next one; the caller publishes the next job only after every claimed chunk is done, so
// a claimed chunk always runs the job it was claimed from.
#include "work_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
#endif
#if defined(_WIN32)
#include <process.h>
#define EC_GETPID _getpid
#else
#include <unistd.h>
#define EC_GETPID getpid
#endif

namespace ec {
namespace {

constexpr int64_t MAX_CHUNKS = (1 << 20) - 1;  // what the claim word's fields hold; bigger jobs are split
constexpr int SPIN = 200;                      // yields before the caller sleeps waiting for workers

// The claim word: generation (24 bits) | chunk count (20) | next chunk (20).
uint64_t pack(uint64_t gen, uint64_t total, uint64_t next) { return (gen << 40) | (total << 20) | next; }
uint64_t gen_of(uint64_t v) { return v >> 40; }
int64_t total_of(uint64_t v) { return (int64_t)((v >> 20) & MAX_CHUNKS); }
int64_t next_of(uint64_t v) { return (int64_t)(v & MAX_CHUNKS); }

// The kernels decode E4M3 into fp32 subnormals on purpose (isa_x86.inc): keep them in every thread.
void keep_denormals() {
#if defined(__x86_64__) || defined(_M_X64)
    _mm_setcsr(_mm_getcsr() & ~0x8040u);  // DAZ and FTZ off
#endif
}

class Pool {
  public:
    void run(int64_t chunks, int threads, void (*call)(void*, int64_t), void* ctx) {
        grow(threads - 1);
        allowed_.store(threads - 1, std::memory_order_relaxed);
        call_ = call, ctx_ = ctx;
        done_.store(0, std::memory_order_relaxed);
        const uint64_t gen = (gen_of(claim_.load(std::memory_order_relaxed)) + 1) & 0xFFFFFF;
        claim_.store(pack(gen, (uint64_t)chunks, 0), std::memory_order_release);
        {
            std::lock_guard<std::mutex> lock(mutex_);  // no lost wake-up: sleepers test the word under it
        }
        wake_.notify_all();
        while (claim_one()) {
        }
        for (int i = 0; i < SPIN && done_.load(std::memory_order_acquire) < chunks; i++) std::this_thread::yield();
        if (done_.load(std::memory_order_acquire) < chunks) {
            std::unique_lock<std::mutex> lock(mutex_);
            finished_.wait(lock, [&] { return done_.load(std::memory_order_acquire) >= chunks; });
        }
    }

  private:
    // Claims and runs one chunk of the current job; false when none is left.
    bool claim_one() {
        uint64_t v = claim_.load(std::memory_order_acquire);
        while (next_of(v) < total_of(v)) {
            if (claim_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
                call_(ctx_, next_of(v));
                if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == total_of(v)) {
                    std::lock_guard<std::mutex> lock(mutex_);
                    finished_.notify_one();
                }
                return true;
            }
        }
        return false;
    }

    void work(int index) {
        keep_denormals();
        for (;;) {
            // the generation is read before looking for chunks: a job published in between
            // changes it, so this worker cannot sleep through that job
            const uint64_t seen = gen_of(claim_.load(std::memory_order_acquire));
            if (index < allowed_.load(std::memory_order_relaxed) && claim_one()) continue;
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return gen_of(claim_.load(std::memory_order_acquire)) != seen; });
        }
    }

    // Starts workers up to `n` (once started they live as long as the process; a forked child,
    // which has none of them, starts its own pool: see pool()).
    void grow(int n) {
        while ((int)started_ < n) {
            std::thread(&Pool::work, this, (int)started_).detach();
            started_++;
        }
    }

    std::atomic<uint64_t> claim_{0};
    std::atomic<int64_t> done_{0};
    std::atomic<int> allowed_{0};
    void (*call_)(void*, int64_t) = nullptr;
    void* ctx_ = nullptr;
    size_t started_ = 0;
    std::mutex mutex_;
    std::condition_variable wake_, finished_;
};

Pool& pool() {
    static Pool* p = nullptr;  // never destroyed: detached workers may still be asleep in it at exit
    static long owner = 0;
    if (p == nullptr || owner != (long)EC_GETPID()) {
        p = new Pool();  // after a fork the parent's workers do not exist here
        owner = (long)EC_GETPID();
    }
    return *p;
}

}  // namespace

void run_chunks(int64_t chunks, int threads, void (*call)(void*, int64_t), void* ctx) {
    threads = (int)std::max<int64_t>(1, std::min<int64_t>(threads, chunks));
    for (int64_t first = 0; first < chunks; first += MAX_CHUNKS) {
        struct Part {
            void (*call)(void*, int64_t);
            void* ctx;
            int64_t first;
        } part{call, ctx, first};
        const int64_t n = std::min<int64_t>(MAX_CHUNKS, chunks - first);
        if (threads == 1) {
            for (int64_t c = 0; c < n; c++) call(ctx, first + c);
            continue;
        }
        pool().run(n, threads, [](void* p, int64_t c) {
            const Part* part = (const Part*)p;
            part->call(part->ctx, part->first + c);
        }, &part);
    }
}

}  // namespace ec
