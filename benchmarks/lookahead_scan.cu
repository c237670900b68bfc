// A look-ahead single-pass scan, prototyped outside the templates to see what the design
// gives before building it there (docs/design/decisions.md, "A look-ahead scan prototyped
// outside the package"). Not part of the package and not run by the tests.
//
// Persistent blocks (1-3 per multiprocessor) each take tiles by ticket. Warp roles:
//   producer    takes tickets, fills a ring of STAGES tiles in dynamic shared memory with
//               cp.async.bulk (mbarrier transaction counts); the last, partial tile by loads;
//   look-ahead  finds each tile's prefix (a decoupled look-back that stops, at the latest,
//               at this block's own previous tile) and publishes its inclusive prefix;
//   reduce      publish each tile's aggregate as soon as its stage lands;
//   scan/store  scan the stage from shared memory, wait for the prefix, store.
// Stage life: full (landed) -> reduced -> prefixed -> empty (scan warps have read it and
// the prefix), each an mbarrier per stage.
//
// Measured on an H200 (2026-11-25): correct for int32 and int64 add at 2^20..2^28; 1.25x CUB
// at 2^20, but at most 66% of copy (int32) and 64% (int64) from 2^24, and with -DNOLB=1 (no
// look-back: wrong sums, the data path alone) only 79% and 70%. What its data path would
// need is in docs/design/decisions.md.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -o lookahead benchmarks/lookahead_scan.cu && ./lookahead
//   switches: -DNOLB=1 (no look-back), -DEARLY=1 (look back before the own tile is reduced),
//   -DMIND=/-DMAXD= (polling back-off in ns)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cub/cub.cuh>
#include <cuda_runtime.h>
#include <unistd.h>
#include <vector>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e = (x);                                                                       \
        if (e != cudaSuccess) {                                                                    \
            printf("CUDA %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e));                    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

enum : unsigned { INVALID = 0, AGG = 1, PREFIX = 2 };

template <class T> __device__ __forceinline__ T op(T a, T b)
{
    return a + b;
}
template <class T> __device__ __forceinline__ T ident()
{
    return T(0);
}

template <class T>
__device__ __forceinline__ void publish(ulonglong2 *status, long long tile, unsigned flag, T v,
                                        unsigned epoch)
{
    union {
        T v;
        unsigned long long b;
    } u;
    u.b = 0;
    u.v = v;
    unsigned long long tag = ((unsigned long long)epoch << 2) | flag;
    asm volatile("st.relaxed.gpu.global.v2.u64 [%0], {%1, %2};" ::"l"(status + tile), "l"(u.b),
                 "l"(tag)
                 : "memory");
}
template <class T>
__device__ __forceinline__ unsigned read_status(const ulonglong2 *status, long long tile,
                                                unsigned epoch, T &v)
{
    unsigned long long b, tag;
    asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];"
                 : "=l"(b), "=l"(tag)
                 : "l"(status + tile)
                 : "memory");
    if ((unsigned)(tag >> 2) != epoch)
        return INVALID;
    union {
        T v;
        unsigned long long b;
    } u;
    u.b = b;
    v = u.v;
    return (unsigned)tag & 3u;
}

__device__ __forceinline__ unsigned sa(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void mbar_init(unsigned long long *b, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sa(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long *b)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(sa(b)) : "memory");
}
__device__ __forceinline__ void mbar_expect(unsigned long long *b, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(b)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long *b, unsigned parity)
{
    unsigned ok = 0;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                     "selp.u32 %0, 1, 0, p; }"
                     : "=r"(ok)
                     : "r"(sa(b)), "r"(parity)
                     : "memory");
    } while (!ok);
}
__device__ __forceinline__ void bulk_load(void *dst, const void *src, unsigned bytes,
                                          unsigned long long *bar)
{
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
            "r"(sa(dst)),
        "l"(src), "r"(bytes), "r"(sa(bar))
        : "memory");
}
__device__ __forceinline__ void named_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

#ifndef NOLB
#define NOLB 0
#endif
#ifndef EARLY
#define EARLY 0
#endif
#ifndef MIND
#define MIND 64
#endif
#ifndef MAXD
#define MAXD 1024
#endif
template <class T, int PL>
__device__ T look_back(const ulonglong2 *status, long long tile, unsigned epoch)
{
    const int lane = threadIdx.x & 31;
    T excl = ident<T>();
    long long end = tile;
    unsigned delay = MIND;
    while (true) {
        const long long first = end - 32 * PL + lane * PL;
        T v[PL];
        unsigned f[PL];
        unsigned long long bits[PL], tag[PL];
#pragma unroll
        for (int r = 0; r < PL; ++r) {
            const long long p = first + r < 0 ? 0 : first + r;
            asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];"
                         : "=l"(bits[r]), "=l"(tag[r])
                         : "l"(status + p)
                         : "memory");
        }
#pragma unroll
        for (int r = 0; r < PL; ++r) {
            union {
                T v;
                unsigned long long b;
            } u;
            u.b = bits[r];
            const bool mine = (unsigned)(tag[r] >> 2) == epoch;
            v[r] = mine ? u.v : ident<T>();
            f[r] = first + r < 0 ? (unsigned)PREFIX
                   : mine        ? (unsigned)(tag[r] & 3u)
                                 : (unsigned)INVALID;
            if (first + r < 0)
                v[r] = ident<T>();
        }
        int lp = -1;
        bool waiting = false;
#pragma unroll
        for (int r = 0; r < PL; ++r) {
            if (f[r] == PREFIX) {
                lp = r;
                waiting = false;
            } else if (f[r] == INVALID)
                waiting = true;
        }
        const unsigned pre = __ballot_sync(~0u, lp >= 0);
        const unsigned inv = __ballot_sync(~0u, waiting);
        const int pl = pre ? 31 - __clz(pre) : -1;
        const unsigned need = pl < 0 ? ~0u : ~((1u << pl) - 1u);
        if (inv & need) {
            __nanosleep(delay);
            delay = delay * 2 < MAXD ? delay * 2 : MAXD;
            continue;
        }
        T x = ident<T>();
#pragma unroll
        for (int r = 0; r < PL; ++r)
            if (lane > pl || (lane == pl && r >= lp))
                x = op(x, v[r]);
#pragma unroll
        for (int d = 1; d < 32; d *= 2) {
            T y = __shfl_up_sync(~0u, x, d);
            if (lane >= d)
                x = op(y, x);
        }
        excl = op(__shfl_sync(~0u, x, 31), excl);
        if (pl >= 0)
            return excl;
        end -= 32 * PL;
    }
}

template <class T> struct Vec;
template <> struct Vec<float> {
    typedef float4 type;
    enum { N = 4 };
};
template <> struct Vec<int> {
    typedef int4 type;
    enum { N = 4 };
};
template <> struct Vec<double> {
    typedef double2 type;
    enum { N = 2 };
};
template <> struct Vec<long long> {
    typedef longlong2 type;
    enum { N = 2 };
};

template <class T, int TILE, int STAGES, int R_WARPS, int S_WARPS, int PL>
__global__ void __launch_bounds__(32 * (2 + R_WARPS + S_WARPS))
    la_scan(const T *in, T *out, long long n, ulonglong2 *status, unsigned long long *ticket,
            unsigned long long base, unsigned epoch)
{
    typedef typename Vec<T>::type V;
    const int VN = Vec<T>::N;
    const int ITEMS = TILE / (32 * S_WARPS);
    extern __shared__ __align__(128) unsigned char smem[];
    T *stages = (T *)smem;
    __shared__ unsigned long long full[STAGES], reduced[STAGES], prefixed[STAGES], empty[STAGES];
    __shared__ long long tile_of[STAGES];
    __shared__ T agg[STAGES], pre[STAGES];
    __shared__ T rtot[STAGES][R_WARPS];
    __shared__ T stot[2][S_WARPS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const long long tiles = (n + TILE - 1) / TILE;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&reduced[s], 1);
            mbar_init(&prefixed[s], 1);
            mbar_init(&empty[s], S_WARPS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (warp == 0) { // producer
        const bool aligned = ((uintptr_t)in & 15) == 0;
        unsigned long long next = 0;
        if (lane == 0)
            next = atomicAdd(ticket, 1ULL);
        for (int k = 0;; ++k) {
            const int s = k % STAGES;
            const unsigned u = k / STAGES;
            if (k >= STAGES)
                mbar_wait(&empty[s], (u - 1) & 1);
            long long tile = 0;
            if (lane == 0) {
                tile = (long long)(next - base);
                if (tile < tiles)
                    next = atomicAdd(ticket, 1ULL);
            }
            tile = __shfl_sync(~0u, tile, 0);
            T *stage = stages + (size_t)s * TILE;
            if (tile >= tiles) {
                if (lane == 0) {
                    tile_of[s] = -1;
                    mbar_arrive(&full[s]);
                }
                return;
            }
            const long long start = tile * TILE;
            if (aligned && start + TILE <= n) {
                if (lane == 0) {
                    tile_of[s] = tile;
                    mbar_expect(&full[s], TILE * sizeof(T));
                    bulk_load(stage, in + start, TILE * sizeof(T), &full[s]);
                }
            } else {
                for (int j = lane; j < TILE; j += 32)
                    stage[j] = start + j < n ? in[start + j] : ident<T>();
                __syncwarp();
                if (lane == 0) {
                    tile_of[s] = tile;
                    mbar_arrive(&full[s]);
                }
            }
        }
    } else if (warp == 1) { // look-ahead
        for (int k = 0;; ++k) {
            const int s = k % STAGES;
            const unsigned u = k / STAGES;
#if EARLY
            mbar_wait(&full[s], u & 1);
#else
            mbar_wait(&reduced[s], u & 1);
#endif
            const long long tile = tile_of[s];
            if (tile < 0)
                return;
            T excl = ident<T>();
#if !NOLB
            if (tile > 0)
                excl = look_back<T, PL>(status, tile, epoch);
#endif
            mbar_wait(&reduced[s], u & 1);
            if (tile > 0 && lane == 0)
                publish(status, tile, PREFIX, op(excl, agg[s]), epoch);
            if (lane == 0) {
                pre[s] = excl;
                mbar_arrive(&prefixed[s]);
            }
        }
    } else if (warp < 2 + R_WARPS) { // reduce
        const int rw = warp - 2;
        const int SEG = TILE / R_WARPS;
        for (int k = 0;; ++k) {
            const int s = k % STAGES;
            const unsigned u = k / STAGES;
            mbar_wait(&full[s], u & 1);
            const long long tile = tile_of[s];
            if (tile < 0) {
                if (rw == 0 && lane == 0)
                    mbar_arrive(&reduced[s]);
                return;
            }
            const T *seg = stages + (size_t)s * TILE + rw * SEG;
            T acc = ident<T>();
#pragma unroll
            for (int it = 0; it < SEG / (32 * VN); ++it) {
                const V v = ((const V *)seg)[it * 32 + lane];
                const T *e = (const T *)&v;
                T x = e[0];
#pragma unroll
                for (int j = 1; j < VN; ++j)
                    x = op(x, e[j]);
#pragma unroll
                for (int d = 1; d < 32; d *= 2)
                    x = op(x, __shfl_down_sync(~0u, x, d));
                acc = op(acc, x);
            }
            if (lane == 0)
                rtot[s][rw] = acc;
            named_sync(1, 32 * R_WARPS);
            if (rw == 0 && lane == 0) {
                T a = rtot[s][0];
                for (int w = 1; w < R_WARPS; ++w)
                    a = op(a, rtot[s][w]);
                agg[s] = a;
                publish(status, tile, tile == 0 ? PREFIX : AGG, a, epoch);
                mbar_arrive(&reduced[s]);
            }
        }
    } else { // scan and store
        const int sw = warp - 2 - R_WARPS;
        const int st = sw * 32 + lane;
        for (int k = 0;; ++k) {
            const int s = k % STAGES;
            const unsigned u = k / STAGES;
            mbar_wait(&full[s], u & 1);
            const long long tile = tile_of[s];
            if (tile < 0)
                return;
            T items[ITEMS];
            const V *src = (const V *)(stages + (size_t)s * TILE + st * ITEMS);
#pragma unroll
            for (int q = 0; q < ITEMS / VN; ++q) {
                const V v = src[q];
                const T *e = (const T *)&v;
#pragma unroll
                for (int j = 0; j < VN; ++j)
                    items[q * VN + j] = e[j];
            }
#pragma unroll
            for (int j = 1; j < ITEMS; ++j)
                items[j] = op(items[j - 1], items[j]);
            T x = items[ITEMS - 1];
#pragma unroll
            for (int d = 1; d < 32; d *= 2) {
                T y = __shfl_up_sync(~0u, x, d);
                if (lane >= d)
                    x = op(y, x);
            }
            T lane_excl = __shfl_up_sync(~0u, x, 1);
            if (lane == 0)
                lane_excl = ident<T>();
            if (lane == 31)
                stot[k & 1][sw] = x;
            named_sync(2, 32 * S_WARPS);
            T wpre = ident<T>();
            for (int w = 0; w < sw; ++w)
                wpre = op(wpre, stot[k & 1][w]);
            mbar_wait(&prefixed[s], u & 1);
            const T b = op(op(pre[s], wpre), lane_excl);
            __syncwarp();
            if (lane == 0)
                mbar_arrive(&empty[s]);
            const long long first = tile * TILE + (long long)st * ITEMS;
            if (first + ITEMS <= n) {
                V *dst = (V *)(out + first);
#pragma unroll
                for (int q = 0; q < ITEMS / VN; ++q) {
                    V v;
                    T *e = (T *)&v;
#pragma unroll
                    for (int j = 0; j < VN; ++j)
                        e[j] = op(b, items[q * VN + j]);
                    dst[q] = v;
                }
            } else {
#pragma unroll
                for (int j = 0; j < ITEMS; ++j)
                    if (first + j < n)
                        out[first + j] = op(b, items[j]);
            }
        }
    }
}

static unsigned long long base = 0;
static unsigned epoch = 0;

static void wait_or_die(cudaEvent_t e, const char *what)
{
    for (int i = 0; i < 20000; ++i) {
        if (cudaEventQuery(e) == cudaSuccess)
            return;
        usleep(100);
    }
    printf("HANG in %s\n", what);
    exit(2);
}

template <class T> const char *tname();
template <> const char *tname<float>()
{
    return "float32";
}
template <> const char *tname<int>()
{
    return "int32";
}
template <> const char *tname<double>()
{
    return "float64";
}
template <> const char *tname<long long>()
{
    return "int64";
}

template <class T, int TILE, int STAGES, int R, int S, int PL>
void run_one(long long n, int bps, const T *din, T *dout, const std::vector<T> &ref, bool check,
             ulonglong2 *status, unsigned long long *ticket, float copy_ms, int sms)
{
    auto kern = la_scan<T, TILE, STAGES, R, S, PL>;
    const int smem = STAGES * TILE * sizeof(T);
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int occ = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, 32 * (2 + R + S), smem));
    int b = bps < occ ? bps : occ;
    const int grid = sms * b;
    const long long tiles = (n + TILE - 1) / TILE;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    const int REPS = 20;
    float best = 1e30f, total = 0;
    for (int r = 0; r < REPS + 2; ++r) {
        ++epoch;
        cudaEventRecord(e0);
        kern<<<grid, 32 * (2 + R + S), smem>>>(din, dout, n, status, ticket, base, epoch);
        cudaEventRecord(e1);
        wait_or_die(e1, "la_scan");
        base += tiles + grid;
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        if (r >= 2) {
            total += ms;
            if (ms < best)
                best = ms;
        }
    }
    CK(cudaGetLastError());
    bool ok = true;
    if (check) {
        std::vector<T> h(n);
        CK(cudaMemcpy(h.data(), dout, n * sizeof(T), cudaMemcpyDeviceToHost));
        for (long long i = 0; i < n; ++i)
            if (h[i] != ref[i]) {
                printf("  MISMATCH at %lld\n", i);
                ok = false;
                break;
            }
    }
    const float mean = total / REPS;
    printf("%s n=2^%d la PL=%d T=%d ST=%d R=%d S=%d bps=%d(occ %d) mean %.1f us best %.1f us = "
           "%.1f%% of copy (best %.1f%%) %s\n",
           tname<T>(), (int)__builtin_ctzll(n), PL, TILE, STAGES, R, S, b, occ, mean * 1e3,
           best * 1e3, 100 * copy_ms / mean, 100 * copy_ms / best,
           check ? (ok ? "OK" : "WRONG") : "");
}

// Mean milliseconds of 20 calls of f (each between CUDA events), after 2 untimed.
template <class F> static float mean_ms(F f)
{
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float total = 0;
    for (int r = 0; r < 22; ++r) {
        cudaEventRecord(e0);
        f();
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        if (r >= 2)
            total += ms;
    }
    return total / 20;
}

template <class T> void bench_type(int lg, bool check, int sms)
{
    const long long n = 1LL << lg;
    T *din, *dout, *dcopy;
    CK(cudaMalloc(&din, n * sizeof(T)));
    CK(cudaMalloc(&dout, n * sizeof(T)));
    CK(cudaMalloc(&dcopy, n * sizeof(T)));
    std::vector<T> h(n), ref;
    srand(1);
    for (long long i = 0; i < n; ++i)
        h[i] = (T)(rand() % 7);
    if (check) {
        ref.resize(n);
        T a = 0;
        for (long long i = 0; i < n; ++i) {
            a += h[i];
            ref[i] = a;
        }
    }
    CK(cudaMemcpy(din, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    ulonglong2 *status;
    unsigned long long *ticket;
    const long long maxtiles = n / 512 + 1;
    CK(cudaMalloc(&status, maxtiles * 16));
    CK(cudaMemset(status, 0, maxtiles * 16));
    CK(cudaMalloc(&ticket, 8));
    CK(cudaMemset(ticket, 0, 8));
    base = 0;
    const float copy = mean_ms([&] {
        cudaMemcpyAsync(dcopy, din, n * sizeof(T), cudaMemcpyDeviceToDevice);
    });
    // CUB
    void *tmp = nullptr;
    size_t tb = 0;
    cub::DeviceScan::InclusiveSum(tmp, tb, din, dcopy, n);
    CK(cudaMalloc(&tmp, tb));
    const float cub = mean_ms([&] { cub::DeviceScan::InclusiveSum(tmp, tb, din, dcopy, n); });
    printf("%s n=2^%d copy %.1f us, CUB %.1f us = %.1f%% of copy\n", tname<T>(), lg, copy * 1e3,
           cub * 1e3, 100 * copy / cub);
    const int T1 = sizeof(T) == 4 ? 4096 : 2048;
    run_one<T, T1, 4, 4, 8, 1>(n, 3, din, dout, ref, check, status, ticket, copy, sms);
    run_one<T, T1, 4, 4, 8, 4>(n, 2, din, dout, ref, check, status, ticket, copy, sms);
    run_one<T, T1, 4, 4, 8, 4>(n, 3, din, dout, ref, check, status, ticket, copy, sms);
    run_one<T, T1, 4, 4, 8, 8>(n, 2, din, dout, ref, check, status, ticket, copy, sms);
    run_one<T, T1, 4, 4, 8, 8>(n, 3, din, dout, ref, check, status, ticket, copy, sms);
    run_one<T, T1, 6, 4, 8, 8>(n, 2, din, dout, ref, check, status, ticket, copy, sms);
    run_one<T, 2 * T1, 4, 4, 8, 8>(n, 1, din, dout, ref, check, status, ticket, copy, sms);
    run_one<T, 2 * T1, 3, 4, 8, 8>(n, 2, din, dout, ref, check, status, ticket, copy, sms);
    cudaFree(din);
    cudaFree(dout);
    cudaFree(dcopy);
    cudaFree(status);
    cudaFree(ticket);
    cudaFree(tmp);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    int sms;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    printf("%s, %d SMs\n", p.name, sms);

    bench_type<int>(24, !NOLB, sms);
    bench_type<int>(28, !NOLB, sms);
    bench_type<long long>(28, !NOLB, sms);
    return 0;
}
