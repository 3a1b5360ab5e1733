// The CPU kernels' own worker threads (work_pool.cpp).
//
// A parallel region of OpenMP (ATen's pool) ends when every thread of the team has arrived, even
// one that had nothing left to do: on a PC where another program holds a core, a woken thread
// can wait a whole time slice before it runs, and a decode step has a few hundred regions. Here
// the chunks are taken from a shared counter, and a call returns once every chunk is finished:
// a worker that wakes too late finds none left and costs the caller nothing. Idle workers sleep
// (they never spin against other processes).
#pragma once

#include <stdint.h>

namespace ec {

// Runs call(ctx, c) for every c in [0, chunks), on the calling thread and up to threads - 1 workers;
// returns when all have finished.
void run_chunks(int64_t chunks, int threads, void (*call)(void*, int64_t), void* ctx);

}  // namespace ec
