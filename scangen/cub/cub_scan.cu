// CUB's DeviceScan, timed the way scangen's bench times every contender (scangen/bench.py):
// CUDA events on the default stream around a batch of back-to-back calls with preallocated
// buffers, after a warm-up, median of several trials, on random non-zero input. A peer for
// `python -m scangen bench --cub`, which builds and runs this file on the GPU machine.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -o cub_scan scangen/cub/cub_scan.cu
//   CUB_TRIALS=7 ./cub_scan float32 add 1048576 268435456     # one JSON line per size
#include <cub/device/device_scan.cuh>

#include "cub_timing.cuh"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

// "last non-zero wins": associative, not commutative (the operator scangen's tests use).
struct LastNonzero
{
    template <class T>
    __host__ __device__ T operator()(const T &a, const T &b) const
    {
        return b != T(0) ? b : a;
    }
};

// Affine maps x -> m*x + c (mod 2^32) packed as m << 32 | c in 64 bits; combining a, then
// b composes the maps (not commutative): scangen.ops.AFFINE_THEN.
struct AffineThen
{
    __host__ __device__ unsigned long long operator()(unsigned long long a,
                                                      unsigned long long b) const
    {
        const unsigned long long mask = 0xFFFFFFFFull;
        const unsigned long long m = ((b >> 32) * (a >> 32)) & mask;
        const unsigned long long c = ((b >> 32) * (a & mask) + (b & mask)) & mask;
        return (m << 32) | c;
    }
};

template <class T>
std::vector<T> random_input(size_t n, bool sparse, bool maps)
{
    std::mt19937_64 rng(2026);
    std::vector<T> host(n);
    if (maps) {  // odd multipliers, so no prefix collapses to a constant map
        for (size_t i = 0; i < n; ++i)
            host[i] = T((((rng() | 1) & 0xFFFFFFFFull) << 32) | (rng() & 0xFFFFFFFFull));
        return host;
    }
    for (size_t i = 0; i < n; ++i) {
        const T value = std::is_floating_point<T>::value
            ? T(0.5 + double(rng() % 1000000) / 1000000.0) : T(1 + rng() % 99);
        host[i] = sparse && rng() % 10 < 7 ? T(0) : value;
    }
    return host;
}

template <class T, class Op>
void run(const char *dtype, const char *op_name, Op op, size_t n, int trials, int warmup)
{
    const std::vector<T> host = random_input<T>(n, std::strcmp(op_name, "last_nonzero") == 0,
                                                std::strcmp(op_name, "affine_then") == 0);
    T *in = nullptr, *out = nullptr;
    CHECK(cudaMalloc(&in, n * sizeof(T)));
    CHECK(cudaMalloc(&out, n * sizeof(T)));
    CHECK(cudaMemcpy(in, host.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    size_t temp_bytes = 0;
    CHECK(cub::DeviceScan::InclusiveScan(nullptr, temp_bytes, in, out, op, n));
    void *temp = nullptr;
    CHECK(cudaMalloc(&temp, temp_bytes));
    auto call = [&] { cub::DeviceScan::InclusiveScan(temp, temp_bytes, in, out, op, n); };
    const double seconds = seconds_per_call(call, 2 * n * sizeof(T), trials, warmup);
    // Spot-check the last element against a sequential scan on the host.
    T last;
    CHECK(cudaMemcpy(&last, out + n - 1, sizeof(T), cudaMemcpyDeviceToHost));
    T want = host[0];
    for (size_t i = 1; i < n; ++i)
        want = op(want, host[i]);
    const double error = std::is_floating_point<T>::value
        ? double(last - want) / double(want == T(0) ? T(1) : want) : double(last != want);
    std::printf("{\"contender\": \"cub.DeviceScan\", \"dtype\": \"%s\", \"op\": \"%s\", "
                "\"n\": %zu, \"seconds\": %.9g, \"last_element_error\": %.3g}\n",
                dtype, op_name, n, seconds, error);
    std::fflush(stdout);
    CHECK(cudaFree(temp));
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
}

template <class T>
void run_op(const char *dtype, const char *op, size_t n, int trials, int warmup)
{
    if (std::strcmp(op, "add") == 0)
        run<T>(dtype, op, cuda::std::plus<T>(), n, trials, warmup);
    else if (std::strcmp(op, "last_nonzero") == 0)
        run<T>(dtype, op, LastNonzero(), n, trials, warmup);
    else if (std::strcmp(op, "affine_then") == 0 && std::is_same<T, unsigned long long>::value)
        run<unsigned long long>(dtype, op, AffineThen(), n, trials, warmup);
    else {
        std::fprintf(stderr, "unknown op %s for %s (add, last_nonzero; affine_then on uint64)\n",
                     op, dtype);
        std::exit(2);
    }
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        std::fprintf(stderr, "usage: %s DTYPE OP N [N ...]  (DTYPE: float32 float64 int32 "
                     "int64 uint32 uint64; OP: add last_nonzero affine_then (uint64); "
                     "CUB_TRIALS, default 7; CUB_QUEUED=1: a call queued ahead of each "
                     "batch)\n", argv[0]);
        return 2;
    }
    const int trials = trials_from_env(), warmup = 3;
    const std::string dtype = argv[1];
    for (int k = 3; k < argc; ++k) {
        const size_t n = std::strtoull(argv[k], nullptr, 10);
        if (dtype == "float32") run_op<float>(argv[1], argv[2], n, trials, warmup);
        else if (dtype == "float64") run_op<double>(argv[1], argv[2], n, trials, warmup);
        else if (dtype == "int32") run_op<int>(argv[1], argv[2], n, trials, warmup);
        else if (dtype == "int64") run_op<long long>(argv[1], argv[2], n, trials, warmup);
        else if (dtype == "uint32") run_op<unsigned>(argv[1], argv[2], n, trials, warmup);
        else if (dtype == "uint64")
            run_op<unsigned long long>(argv[1], argv[2], n, trials, warmup);
        else {
            std::fprintf(stderr, "unknown dtype %s\n", argv[1]);
            return 2;
        }
    }
    return 0;
}
