// The timing the CUB peer programs share (cub_scan.cu, cub_primitives.cu, here),
// the way scangen's bench times every contender (scangen/bench.py): CUDA events on the default
// stream around a batch of back-to-back calls with preallocated buffers, after a warm-up,
// median of several trials.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                                      \
    do {                                                                                 \
        cudaError_t error_ = (call);                                                     \
        if (error_ != cudaSuccess) {                                                     \
            std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__,                      \
                         cudaGetErrorString(error_));                                    \
            std::exit(1);                                                                \
        }                                                                                \
    } while (0)

// Trials per measurement: CUB_TRIALS from the environment (scangen's --trials), default 7.
inline int trials_from_env()
{
    const char *text = std::getenv("CUB_TRIALS");
    return text ? std::max(std::atoi(text), 1) : 7;
}

// CUB_QUEUED=1 from the environment (scangen's --queued): one untimed call is queued ahead
// of each timed batch, so the timed calls' host work overlaps the kernels ahead of them.
inline bool queued_from_env()
{
    const char *text = std::getenv("CUB_QUEUED");
    return text && std::atoi(text) != 0;
}

// Calls per timed batch: about 200 MB moved per batch, 1 to 200 calls.
inline int batch_size(size_t bytes)
{
    return int(
        std::max<size_t>(1, std::min<size_t>(200, size_t(2e8) / std::max<size_t>(bytes, 1))));
}

// Seconds per call: the median over trials of (batch time / batch size).
template <class Call>
double seconds_per_call(Call call, size_t bytes, int trials, int warmup)
{
    for (int i = 0; i < warmup; ++i)
        call();
    CHECK(cudaDeviceSynchronize());
    const int batch = batch_size(bytes);
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    std::vector<double> times;
    const bool queued = queued_from_env();
    for (int t = 0; t < trials; ++t) {
        if (queued)
            call();
        CHECK(cudaEventRecord(start));
        for (int i = 0; i < batch; ++i)
            call();
        CHECK(cudaEventRecord(stop));
        CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, start, stop));
        times.push_back(ms / 1e3 / batch);
    }
    CHECK(cudaGetLastError());
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}
