// CUB's device primitives as peers of scangen's (benchmarks/primitives.py), on the same kinds
// of input, timed the same way (cub_timing.cuh). Each row is named after the table
// of primitives.py it joins; `python benchmarks/primitives.py --cub` builds and runs this file.
// Counts (selected, runs) stay on the device: no call waits for the host. Every result is
// checked once on the host, at the first size; a wrong one aborts.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -o cub_primitives scangen/cub/cub_primitives.cu
//   CUB_TRIALS=7 ./cub_primitives 1048576 67108864     # one JSON line per (primitive, n)
//
// CUB 3.3 and later (CCCL's headers put first on the include path, -I DIR: what
// SCANGEN_CCCL_INCLUDE names for the bench) add DeviceSegmentedScan, which scans by CSR
// offsets; older CUB has no such row.
#include <cub/device/device_histogram.cuh>
#include <cub/device/device_partition.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <cub/version.cuh>
#if CUB_VERSION >= 300300
#include <cub/device/device_segmented_scan.cuh>
#define HAS_DEVICE_SEGMENTED_SCAN 1
#endif

#include "cub_timing.cuh"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

// A device array, freed with its scope.
template <class T>
struct Buffer
{
    T *ptr = nullptr;
    explicit Buffer(size_t n) { CHECK(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T))); }
    explicit Buffer(const std::vector<T> &host) : Buffer(host.size())
    {
        CHECK(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;
    ~Buffer() { cudaFree(ptr); }
    std::vector<T> get(size_t n) const
    {
        std::vector<T> host(n);
        CHECK(cudaMemcpy(host.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost));
        return host;
    }
};

struct LessThanHalf
{
    __host__ __device__ bool operator()(float x) const { return x < 0.5f; }
};

struct Bench
{
    int n, trials, warmup;
    bool check;  // at the first size only

    // Time `call(temp, temp_bytes)`, a CUB call with its temporary storage allocated once.
    template <class Call>
    double time(Call call, size_t bytes) const
    {
        size_t temp_bytes = 0;
        CHECK(call(nullptr, temp_bytes));
        Buffer<char> temp(temp_bytes);
        return seconds_per_call([&] { CHECK(call(temp.ptr, temp_bytes)); }, bytes, trials,
                                warmup);
    }

    void expect(bool ok, const char *primitive) const
    {
        if (!ok) {
            std::fprintf(stderr, "cub_primitives: wrong result for \"%s\" at n = %d\n",
                         primitive, n);
            std::exit(1);
        }
    }

    void row(const char *primitive, const char *contender, double seconds) const
    {
        std::printf("{\"primitive\": \"%s\", \"contender\": \"%s\", \"n\": %d, "
                    "\"seconds\": %.9g}\n", primitive, contender, n, seconds);
        std::fflush(stdout);
    }
};

// Uniform floats in [0, 1), exact multiples of 2^-24.
std::vector<float> uniform_floats(int n, std::mt19937_64 &rng)
{
    std::vector<float> x(n);
    for (float &v : x)
        v = float(rng() >> 40) / float(1 << 24);
    return x;
}

void select_and_partition(const Bench &b, std::mt19937_64 &rng)
{
    const int n = b.n;
    const std::vector<float> x = uniform_floats(n, rng);
    std::vector<unsigned char> mask(n);
    for (auto &m : mask)
        m = rng() & 1;
    Buffer<float> in(x), out(n);
    Buffer<unsigned char> flags(mask);
    Buffer<int> count(1);

    const char *select = "select float32, half kept, mask given";
    std::vector<float> kept;
    for (int i = 0; i < n; ++i)
        if (mask[i])
            kept.push_back(x[i]);
    double s = b.time([&](void *t, size_t &bytes) {
        return cub::DeviceSelect::Flagged(t, bytes, in.ptr, flags.ptr, out.ptr, count.ptr, n);
    }, 5 * size_t(n) + 4 * kept.size());
    if (b.check)
        b.expect(count.get(1)[0] == int(kept.size()) && out.get(kept.size()) == kept, select);
    b.row(select, "cub DeviceSelect::Flagged", s);

    const char *partition = "partition float32, half true";
    s = b.time([&](void *t, size_t &bytes) {
        return cub::DevicePartition::If(t, bytes, in.ptr, out.ptr, count.ptr, n, LessThanHalf());
    }, 8 * size_t(n));
    if (b.check) {
        const int first = int(std::count_if(x.begin(), x.end(), LessThanHalf()));
        const std::vector<float> got = out.get(n);
        b.expect(count.get(1)[0] == first &&
                 std::all_of(got.begin(), got.begin() + first, LessThanHalf()) &&
                 std::none_of(got.begin() + first, got.end(), LessThanHalf()), partition);
    }
    b.row(partition, "cub DevicePartition::If", s);

    const char *histogram = "histogram float32, 256 bins";
    Buffer<int> bins(256);
    s = b.time([&](void *t, size_t &bytes) {
        return cub::DeviceHistogram::HistogramEven(t, bytes, in.ptr, bins.ptr, 257, 0.0f, 1.0f, n);
    }, 4 * size_t(n));
    if (b.check) {
        std::vector<int> want(256, 0);
        for (float v : x)
            ++want[int(v * 256.0f)];
        b.expect(bins.get(256) == want, histogram);
    }
    b.row(histogram, "cub DeviceHistogram::HistogramEven", s);
}

void radix_sort(const Bench &b, std::mt19937_64 &rng)
{
    const int n = b.n;
    std::vector<uint32_t> keys(n), values(n);
    for (int i = 0; i < n; ++i) {
        keys[i] = uint32_t(rng());
        values[i] = uint32_t(rng());
    }
    Buffer<uint32_t> keys_in(keys), keys_out(n), values_in(values), values_out(n);

    const char *sort = "radix_sort uint32 keys";
    double s = b.time([&](void *t, size_t &bytes) {
        return cub::DeviceRadixSort::SortKeys(t, bytes, keys_in.ptr, keys_out.ptr, n);
    }, 8 * size_t(n));
    std::vector<uint32_t> sorted = keys;
    std::sort(sorted.begin(), sorted.end());
    if (b.check)
        b.expect(keys_out.get(n) == sorted, sort);
    b.row(sort, "cub DeviceRadixSort::SortKeys", s);

    // The DoubleBuffer form sorts in place, so each call gets unsorted keys of its own: as
    // many copies as the timing makes calls, copied before it starts. Skipped where they
    // would not fit in half the free memory.
    const size_t calls = size_t(b.warmup) + size_t(b.trials) * batch_size(8 * size_t(n));
    size_t free_bytes = 0, total_bytes = 0;
    CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (calls * n * sizeof(uint32_t) < free_bytes / 2) {
        Buffer<uint32_t> copies(calls * n);
        for (size_t c = 0; c < calls; ++c)
            CHECK(cudaMemcpy(copies.ptr + c * n, keys_in.ptr, n * sizeof(uint32_t),
                             cudaMemcpyDeviceToDevice));
        size_t next = 0;
        cub::DoubleBuffer<uint32_t> last;
        s = b.time([&](void *t, size_t &bytes) {
            cub::DoubleBuffer<uint32_t> buffers(copies.ptr + std::min(next, calls - 1) * n,
                                                keys_out.ptr);
            if (t != nullptr)
                ++next;
            const cudaError_t error = cub::DeviceRadixSort::SortKeys(t, bytes, buffers, n);
            last = buffers;
            return error;
        }, 8 * size_t(n));
        if (b.check) {
            std::vector<uint32_t> got(n);
            CHECK(cudaMemcpy(got.data(), last.Current(), n * sizeof(uint32_t),
                             cudaMemcpyDeviceToHost));
            b.expect(got == sorted, sort);
        }
        b.row(sort, "cub DeviceRadixSort::SortKeys (DoubleBuffer)", s);
    } else {
        std::fprintf(stderr, "cub_primitives: SortKeys (DoubleBuffer) skipped at n = %d: "
                     "%zu copies of the keys do not fit\n", n, calls);
    }

    const char *pairs = "radix_sort uint32 keys + uint32 values";
    s = b.time([&](void *t, size_t &bytes) {
        return cub::DeviceRadixSort::SortPairs(t, bytes, keys_in.ptr, keys_out.ptr,
                                               values_in.ptr, values_out.ptr, n);
    }, 16 * size_t(n));
    if (b.check) {  // the sort is stable: values of equal keys keep their order
        std::vector<int> order(n);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(),
                         [&](int i, int j) { return keys[i] < keys[j]; });
        std::vector<uint32_t> want(n);
        for (int i = 0; i < n; ++i)
            want[i] = values[order[i]];
        b.expect(keys_out.get(n) == sorted && values_out.get(n) == want, pairs);
    }
    b.row(pairs, "cub DeviceRadixSort::SortPairs", s);
}

void runs_of_four(const Bench &b, std::mt19937_64 &rng)
{
    const int n = b.n;
    std::vector<int> runs(n);  // runs of 4 equal values in 0..999, as primitives.py makes them
    for (int i = 0; i < n; i += 4)
        std::fill(runs.begin() + i, runs.begin() + std::min(i + 4, n), int(rng() % 1000));
    std::vector<int> want_unique, want_counts;
    for (int i = 0; i < n; ++i) {
        if (i == 0 || runs[i] != runs[i - 1]) {
            want_unique.push_back(runs[i]);
            want_counts.push_back(0);
        }
        ++want_counts.back();
    }
    const size_t m = want_unique.size();
    Buffer<int> in(runs), unique(n), counts(n), count(1);

    const char *select = "unique int32, runs of 4";
    double s = b.time([&](void *t, size_t &bytes) {
        return cub::DeviceSelect::Unique(t, bytes, in.ptr, unique.ptr, count.ptr, n);
    }, 5 * size_t(n));
    if (b.check)
        b.expect(count.get(1)[0] == int(m) && unique.get(m) == want_unique, select);
    b.row(select, "cub DeviceSelect::Unique", s);

    const char *rle = "run_length_encode int32, runs of 4";
    s = b.time([&](void *t, size_t &bytes) {
        return cub::DeviceRunLengthEncode::Encode(t, bytes, in.ptr, unique.ptr, counts.ptr,
                                                  count.ptr, n);
    }, 7 * size_t(n));
    if (b.check)
        b.expect(count.get(1)[0] == int(m) && unique.get(m) == want_unique &&
                 counts.get(m) == want_counts, rle);
    b.row(rle, "cub DeviceRunLengthEncode::Encode", s);

    // scangen's counts are int64 (inputs past 2^31 elements): CUB writing the same.
    Buffer<long long> wide_counts(n);
    s = b.time([&](void *t, size_t &bytes) {
        return cub::DeviceRunLengthEncode::Encode(t, bytes, in.ptr, unique.ptr,
                                                  wide_counts.ptr, count.ptr, n);
    }, 7 * size_t(n));
    if (b.check) {
        const std::vector<long long> want_wide(want_counts.begin(), want_counts.end());
        b.expect(count.get(1)[0] == int(m) && unique.get(m) == want_unique &&
                 wide_counts.get(m) == want_wide, rle);
    }
    b.row(rle, "cub DeviceRunLengthEncode::Encode, int64 counts", s);
}

// Segmented scans, float32 add, over segments of random lengths made as primitives.py makes
// them (the cuts between segments drawn uniformly with replacement, so a few may be empty).
// CUB scans by key: each element's key is its segment's number, so the runs of equal keys
// are the segments (the empty ones have no elements). CUB 3.3 and later also scan by the
// offsets themselves (DeviceSegmentedScan, each segment from its begin to its end offset).
void segmented_scans(const Bench &b, std::mt19937_64 &rng)
{
    const int n = b.n;
    std::vector<float> x(n);
    for (float &v : x)
        v = float(rng() % 4);  // whole numbers: sums below 2^24 are exact in any order
    Buffer<float> in(x), out(n);
    for (const int segments : {1, 1024, 65536, 1 << 20}) {
        if (segments > n)
            continue;
        std::vector<long long> offsets(segments + 1, 0);
        offsets[segments] = n;
        for (int s = 1; s < segments; ++s)
            offsets[s] = (long long)(rng() % (unsigned long long)(n + 1));
        std::sort(offsets.begin() + 1, offsets.end() - 1);
        std::vector<int> keys(n);
        for (int s = 0; s < segments; ++s)
            std::fill(keys.begin() + offsets[s], keys.begin() + offsets[s + 1], s);
        Buffer<int> segment_keys(keys);
        char primitive[64];
        std::snprintf(primitive, sizeof primitive, "segmented scan float32 add, %d segment%s",
                      segments, segments > 1 ? "s" : "");
        // Exact below 2^24; above, sums in another order round otherwise.
        const auto check = [&]() {
            if (!b.check)
                return;
            const std::vector<float> got = out.get(n);
            double sum = 0;
            bool ok = true;
            for (int i = 0; i < n; ++i) {
                sum = (i == 0 || keys[i] != keys[i - 1]) ? x[i] : sum + x[i];
                const double error = std::abs(double(got[i]) - sum);
                ok = ok && (sum < 16777216.0 ? error == 0 : error <= sum * 0x1p-16);
            }
            b.expect(ok, primitive);
        };
        const double s = b.time([&](void *t, size_t &bytes) {
            return cub::DeviceScan::InclusiveSumByKey(t, bytes, segment_keys.ptr, in.ptr,
                                                      out.ptr, n);
        }, 8 * size_t(n) + 8 * size_t(segments + 1));
        check();
        b.row(primitive, "cub DeviceScan::InclusiveSumByKey (int32 keys)", s);
#ifdef HAS_DEVICE_SEGMENTED_SCAN
        Buffer<long long> starts(offsets);
        const double by_offsets = b.time([&](void *t, size_t &bytes) {
            return cub::DeviceSegmentedScan::InclusiveSegmentedSum(
                t, bytes, in.ptr, out.ptr, starts.ptr, starts.ptr + 1, segments);
        }, 8 * size_t(n) + 8 * size_t(segments + 1));
        check();
        b.row(primitive, "cub DeviceSegmentedScan::InclusiveSegmentedSum (offsets)",
              by_offsets);
#endif
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s N [N ...]  (sizes; CUB_TRIALS, default 7; "
                             "CUB_QUEUED=1: a call queued ahead of each batch)\n", argv[0]);
        return 2;
    }
    const int trials = trials_from_env();
    for (int k = 1; k < argc; ++k) {
        const long long n = std::strtoll(argv[k], nullptr, 10);
        if (n < 1 || n > INT_MAX) {
            std::fprintf(stderr, "size %s: want 1 to %d\n", argv[k], INT_MAX);
            return 2;
        }
        const Bench bench{int(n), trials, 3, k == 1};
        std::mt19937_64 rng(2026);
        select_and_partition(bench, rng);
        radix_sort(bench, rng);
        runs_of_four(bench, rng);
        segmented_scans(bench, rng);
    }
    return 0;
}
