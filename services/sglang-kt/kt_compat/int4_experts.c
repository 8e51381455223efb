// A CPU layer's GPTQ-Int4 experts computed from the checkpoint's own 4-bit values (issue 18; the adapter's opt-in
// VRAMKIT_KT_CPU_DECODE=int4, vramkit_int4_experts.py). Why: at 16 GiB the kit's token is its GPU work plus ~10 CPU
// layers, and a CPU layer's decode reads its 8 experts' weights once a token: 37.7 MB in kt-kernel's AMXINT8, 19.5 MB
// as GPTQ-Int4 (4 bits and a float16 scale per 128 inputs). At batch 1 the layer is bound by host read bandwidth,
// so half the bytes is close to half the time; kt-kernel 0.5.1 has no int4 kernel that reads the GPTQ values as they
// are at that pace (its RAWINT4 computes the value -8 wrong and read 35 GB/s, benchmarks/results/gpu/kt-rawint4/).
//
// What it computes, for each token t of a decode batch and each of its top-k slots (expert e, routing weight w):
//   out[t] += w * down_e(silu(gate_e(x[t])) * up_e(x[t])),  W[k][n] = (q[k][n] - 8) * scale[k / group][n]
// with symmetric GPTQ (zero point 8, no act-order): the same values SGLang's marlin MoE computes on the GPU layers,
// here in float32 (the inputs as float32, each group's sum scaled once; the 8-wide builds sum x * q and take 8 * the
// group's input sum off, the same sum in another order: within 1e-6 of float64 of the largest output). A slot whose
// expert id is outside 0..E-1 (SGLang's -1 for a masked slot) adds nothing.
//
// Layout (repacked at load, from the checkpoint's [K / 8, N] qweight and [K / group, N] scales): each projection in
// strips of 16 output columns, a strip's words in input order, so one unit of work streams one contiguous block:
//   w13 (gate | up) per expert [I / 16][H / 8][2][16] u32, scales [I / 16][H / group][2][16] f16
//   w2 (down) per expert       [H / 16][I / 8][16] u32,    scales [H / 16][I / group][16] f16
// A call runs three phases on the pool: (expert, strip) units of gate/up into a float32 scratch; (expert, 8 output
// strips) units of down, each slot's weighted share into a second scratch; then output strips, each token's shares
// summed in slot order (no reduction across threads: the result does not depend on the thread count).
//
// Threads: n - 1 workers pinned one to a CPU (the list it is given: the first of the process's affinity), plus the
// caller (the CUDA driver thread that runs the host function); units are taken from one atomic counter in runs
// (run_units). Idle workers spin 20 ms (the gap between two CPU layers of a token is ~0.1-1 ms of GPU work), then
// sleep on a futex.
//
// Build: cc -O3 -march=native -shared -fPIC -pthread int4_experts.c -o libvramkit_int4_experts.so
// (-march=native: AVX-512 where the CPU has it, else AVX2, else the compiler's generic vectors; v4_isa() says which)
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__AVX512F__) || defined(__AVX2__) || defined(__SSE2__)
#include <immintrin.h>
#endif

#pragma GCC diagnostic ignored "-Wpsabi"    // the 64-byte vectors never cross this file's boundary

#define STRIP 16
#define PACK 8
#define MAX_TOKENS 64
#define SPIN_MS 20.0
// V4_MASKED: how a word's nibbles become floats (nibbles(), below): a permute through a table on AVX-512, masked in
// place on the 8-wide builds. -DV4_MASKED=1 gives an AVX-512 build the masked nibbles at 16 wide
// (VRAMKIT_INT4_ISA=masked): a candidate, 6-8 % faster alone on the dev machine's Zen 4; in a GPU host's server
// (moe-vs-llamacpp-int4/r7/) faster at depth 0 and slower after 8K, each within one start's spread: not the default
#ifndef V4_MASKED
#if defined(__AVX512F__)
#define V4_MASKED 0
#else
#define V4_MASKED 1
#endif
#endif
#if defined(__AVX512F__)
#define TCHUNK 4          // tokens computed on one pass over a strip's words (their accumulators stay in registers)
#if V4_MASKED
#define ISA "avx512-masked"
#else
#define ISA "avx512"
#endif
#elif defined(__AVX2__)
#define TCHUNK 2
#define ISA "avx2"
#else
#define TCHUNK 2
#define ISA "generic"
#endif

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
typedef uint32_t v16u __attribute__((vector_size(64)));

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static inline void cpu_relax(void) {
#if defined(__SSE2__)
    _mm_pause();
#endif
}

#if !defined(__AVX512F__) && !defined(__F16C__)
static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t) (h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {                      // subnormal: normalize
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) { man <<= 1; exp--; }
            bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000 | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
#endif

// The kernels compute in vectors of the CPU's own width, W floats (AVX-512: one 16-column strip a vector; AVX2 and the
// generic build: two of 8): a 64-byte vector type on an AVX2 target is lowered through memory by the compiler (measured
// on the dev host: ~1 GB/s a thread), so the strips' code is written over `vf`.
#if defined(__AVX512F__)
#define W 16
#else
#define W 8
#endif
#define NV (STRIP / W)      // vectors a strip
typedef float vf __attribute__((vector_size(W * 4)));
typedef int32_t vi __attribute__((vector_size(W * 4)));
typedef uint32_t vu __attribute__((vector_size(W * 4)));

// W scales from float16
static inline __attribute__((always_inline)) vf scales_w(const uint16_t *s) {
#if defined(__AVX512F__)
    return (vf) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) s));
#elif defined(__F16C__)
    return (vf) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) s));
#else
    vf r;
    for (int c = 0; c < W; c++) r[c] = half_to_float(s[c]);
    return r;
#endif
}

// AVX-512: nibble j of each word as the W values q - 8, one shift and one permute through a table of -8..7.
// The 8-wide builds (AVX2, generic): nibble j masked in place, q * 16^j for j < 7 (an AND: exact as an int32 and as
// a float, at most 4 significant bits), and q for j = 7 (a shift), converted: 2 operations before the FMA where
// (q >> 4j) & 15, - 8 and the conversion took 4. The inputs are taken scaled by 16^-j (XSCALE, exact: a power of two)
// so each product is x * q exactly as before, and the 8 of q - 8 comes off once a group: 8 * the group's input sum
// (OFFSET_IN_SUMS) before its scale multiplies
#if defined(__AVX512F__) && !V4_MASKED
#define OFFSET_IN_SUMS 0
static inline __attribute__((always_inline)) vf nibbles(vu q, int j) {
    const __m512 lut = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    return (vf) _mm512_permutexvar_ps((__m512i) (q >> (4 * j)), lut);   // the index's low 4 bits only
}
#else
#define OFFSET_IN_SUMS 1
static inline __attribute__((always_inline)) vf nibbles(vu q, int j) {
    return __builtin_convertvector((vi) (j == PACK - 1 ? q >> (4 * j) : q & (15u << (4 * j))), vf);
}
#endif
#if OFFSET_IN_SUMS
// what input k is multiplied by before it meets nibble k % 8
static const float XSCALE[PACK] = {1.0f, 0x1p-4f, 0x1p-8f, 0x1p-12f, 0x1p-16f, 0x1p-20f, 0x1p-24f, 1.0f};
#endif

// ---------------------------------------------------------------------------------------------------- the pool
typedef void (*unit_fn)(void *arg, int unit);

typedef struct v4_pool {
    int n_workers;
    pthread_t *threads;
    int *cpus;
    _Atomic uint32_t gen;
    _Atomic int next, done, sleepers, stop;
    unit_fn fn;
    void *arg;
    int units;
    pthread_mutex_t run_lock;   // one call at a time: host functions of two streams may run on two driver threads
    // statistics for the server log: every call, and a window of report_every calls (compute time, and the time
    // from one call's end to the next call's start where under 50 ms: the GPU's share between two CPU layers; how
    // far apart the threads finished each phase, summed over a call's phases: a thread slowed by another process on
    // its core shows here; and the calls whose caller ran on a worker's CPU, so the two shared a core)
    long calls, report_every, win_calls, win_gaps, win_clash;
    double win_ms, win_gap_ms, last_end, win_spread_ms;
    double *finish;             // each worker's end of its last phase (written before its done count)
    int caller_cpu;             // >= 0: the calling thread is pinned there at its first call (v4_pool_pin_caller)
    // a call in two halves (v4_start / v4_wait): the job handed to a coordinator thread, which runs it as v4_run's
    // caller would, so the stream that started it can run the GPU's share of the layer before it waits
    pthread_t coord;
    int coord_on;
    _Atomic(void *) posted;
    _Atomic uint32_t post_gen;
    _Atomic int coord_sleeps, coord_stop;
} v4_pool;

typedef struct { v4_pool *p; int idx; } warg;

static void futex_wait(_Atomic uint32_t *addr, uint32_t val) {
    syscall(SYS_futex, (uint32_t *) addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr) {
    syscall(SYS_futex, (uint32_t *) addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

// units taken in runs of consecutive ones, each run half the remaining units' fair share (guided, as OpenMP's
// schedule(guided)): a thread's first runs read one long stretch of an expert's weights, its last ones balance the
// threads. One unit at a time had each thread's units scattered a block apart, the hardware prefetcher restarting at
// each: on the dev machine's two cores 23 against 26-29 GB/s chunked
static void run_units(v4_pool *p) {
    const int threads = p->n_workers + 1;
    for (;;) {
        const int seen = atomic_load_explicit(&p->next, memory_order_relaxed);
        if (seen >= p->units) break;
        const int run = (p->units - seen) / (2 * threads) > 1 ? (p->units - seen) / (2 * threads) : 1;
        const int u = atomic_fetch_add_explicit(&p->next, run, memory_order_relaxed);
        const int end = u + run < p->units ? u + run : p->units;
        for (int v = u; v < end; v++) p->fn(p->arg, v);
    }
}

// pin the calling thread to `cpu`; 0 where it is now pinned there
static int pin_self(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

// a generation past `seen` (returned), spinning spin_ms before sleeping on the futex (counted in `sleepers`, so the one
// who moves the generation knows to wake): the pool's workers wait for a call this way, the coordinator for a job,
// v4_wait for its job's end
static uint32_t await_gen(_Atomic uint32_t *gen, uint32_t seen, _Atomic int *sleepers, double spin_ms) {
    uint32_t g;
    long spins = 0;
    double t0 = 0;
    while ((g = atomic_load_explicit(gen, memory_order_acquire)) == seen) {
        cpu_relax();
        if ((++spins & 1023) == 0) {
            double t = now_ms();
            if (t0 == 0) {
                t0 = t;
            } else if (t - t0 > spin_ms) {
                atomic_fetch_add(sleepers, 1);
                futex_wait(gen, seen);
                atomic_fetch_sub(sleepers, 1);
                t0 = 0;
            }
        }
    }
    return g;
}

static void *worker(void *arg) {
    warg *w = arg;
    v4_pool *p = w->p;
    const int idx = w->idx;
    if (p->cpus && p->cpus[idx] >= 0) pin_self(p->cpus[idx]);
    free(w);
    uint32_t seen = 0;    // the pool's first generation, not the one it reads now: a call made before this thread
                          // ran would otherwise be missed, and its caller wait for this worker forever
    for (;;) {
        seen = await_gen(&p->gen, seen, &p->sleepers, SPIN_MS);
        if (atomic_load(&p->stop)) break;
        run_units(p);
        p->finish[idx] = now_ms();
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
    }
    return NULL;
}

// n_threads computing threads in all: n_threads - 1 workers pinned to cpus[0..] (NULL or a -1: not pinned), and the
// caller of each call
v4_pool *v4_pool_new(int n_threads, const int *cpus, long report_every) {
    if (n_threads < 1) return NULL;
    v4_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_workers = n_threads - 1;
    p->report_every = report_every;
    p->caller_cpu = -1;
    pthread_mutex_init(&p->run_lock, NULL);
    p->threads = calloc((size_t) p->n_workers + 1, sizeof *p->threads);
    p->cpus = calloc((size_t) p->n_workers + 1, sizeof *p->cpus);
    p->finish = calloc((size_t) p->n_workers + 1, sizeof *p->finish);
    if (!p->threads || !p->cpus || !p->finish) {
        free(p->threads);
        free(p->cpus);
        free(p->finish);
        pthread_mutex_destroy(&p->run_lock);
        free(p);
        return NULL;
    }
    for (int i = 0; i < p->n_workers; i++) p->cpus[i] = cpus ? cpus[i] : -1;
    for (int i = 0; i < p->n_workers; i++) {
        warg *w = malloc(sizeof *w);
        *w = (warg){p, i};
        if (pthread_create(&p->threads[i], NULL, worker, w) != 0) {
            free(w);
            p->n_workers = i;         // the ones started stop with the pool
            break;
        }
    }
    return p;
}

// runs `units` units of `fn` on the pool and the caller; returns how far apart (ms) the threads finished them
static double dispatch(v4_pool *p, unit_fn fn, void *arg, int units) {
    p->fn = fn;
    p->arg = arg;
    p->units = units;
    atomic_store(&p->next, 0);
    atomic_store(&p->done, 0);
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->sleepers) > 0) futex_wake(&p->gen);
    run_units(p);
    const double mine = now_ms();
    while (atomic_load_explicit(&p->done, memory_order_acquire) < p->n_workers) cpu_relax();
    double lo = mine, hi = mine;
    for (int i = 0; i < p->n_workers; i++) {
        lo = p->finish[i] < lo ? p->finish[i] : lo;
        hi = p->finish[i] > hi ? p->finish[i] : hi;
    }
    return hi - lo;
}

void v4_pool_free(v4_pool *p) {
    if (p->coord_on) {          // first: a job it holds or has been handed runs to its end on the workers
        atomic_store(&p->coord_stop, 1);
        atomic_fetch_add(&p->post_gen, 1);
        futex_wake(&p->post_gen);
        pthread_join(p->coord, NULL);
    }
    atomic_store(&p->stop, 1);
    atomic_fetch_add(&p->gen, 1);
    futex_wake(&p->gen);
    for (int i = 0; i < p->n_workers; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->run_lock);
    free(p->threads);
    free(p->cpus);
    free(p->finish);
    free(p);
}

int v4_pool_threads(v4_pool *p) { return p->n_workers + 1; }

// Pin whichever thread calls v4_run (in the server CUDA's host-function thread, which computes beside the workers) to
// `cpu` at its first call, so it never shares a worker's core; -1: leave it where the OS puts it (the default)
void v4_pool_pin_caller(v4_pool *p, int cpu) { p->caller_cpu = cpu; }

const char *v4_isa(void) { return ISA; }

int v4_max_tokens(void) { return MAX_TOKENS; }

// ---------------------------------------------------------------------------------------------------- a layer
typedef struct v4_layer {
    v4_pool *pool;
    int E, K, H, I, G;
    uint32_t *w13, *w2;
    uint16_t *s13, *s2;
    size_t w13_e, w2_e, s13_e, s2_e;   // elements per expert
    size_t bytes;
} v4_layer;

static void *big_alloc(size_t bytes) {
    size_t align = 2u << 20;
    void *p = NULL;
    if (posix_memalign(&p, align, (bytes + align - 1) / align * align) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, (bytes + align - 1) / align * align, MADV_HUGEPAGE);   // fewer TLB misses on a 19 MB stream a token
#endif
    return p;
}

// NULL where the shape is not whole strips and groups (the Python side says which)
v4_layer *v4_layer_new(v4_pool *pool, int n_expert, int n_used, int hidden, int inter, int group) {
    if (n_expert < 1 || n_used < 1 || n_used > n_expert || group < PACK || group % PACK || hidden % STRIP
        || inter % STRIP || hidden % group || inter % group)
        return NULL;
    v4_layer *L = calloc(1, sizeof *L);
    if (!L) return NULL;
    *L = (v4_layer){.pool = pool, .E = n_expert, .K = n_used, .H = hidden, .I = inter, .G = group};
    L->w13_e = (size_t) (hidden / PACK) * 2 * inter;
    L->w2_e = (size_t) (inter / PACK) * hidden;
    L->s13_e = (size_t) (hidden / group) * 2 * inter;
    L->s2_e = (size_t) (inter / group) * hidden;
    L->bytes = (size_t) n_expert * ((L->w13_e + L->w2_e) * 4 + (L->s13_e + L->s2_e) * 2);
    L->w13 = big_alloc((size_t) n_expert * L->w13_e * 4);
    L->w2 = big_alloc((size_t) n_expert * L->w2_e * 4);
    L->s13 = big_alloc((size_t) n_expert * L->s13_e * 2);
    L->s2 = big_alloc((size_t) n_expert * L->s2_e * 2);
    if (!L->w13 || !L->w2 || !L->s13 || !L->s2) {
        free(L->w13); free(L->w2); free(L->s13); free(L->s2); free(L);
        return NULL;
    }
    return L;
}

size_t v4_layer_bytes(v4_layer *L) { return L->bytes; }

void v4_layer_free(v4_layer *L) {
    free(L->w13); free(L->w2); free(L->s13); free(L->s2); free(L);
}

// every expert from the checkpoint's layout, as SGLang's FusedMoE holds it before its repack (contiguous):
// w13_q [E][H / 8][2I] (gate columns, then up), w13_s [E][H / G][2I] f16, w2_q [E][I / 8][H], w2_s [E][I / G][H] f16
void v4_layer_set(v4_layer *L, const uint32_t *w13_q, const uint16_t *w13_s, const uint32_t *w2_q,
                  const uint16_t *w2_s) {
    const int H = L->H, I = L->I, G = L->G, KB13 = H / PACK, GB13 = H / G, KB2 = I / PACK, GB2 = I / G;
    for (int e = 0; e < L->E; e++) {
        const uint32_t *q = w13_q + e * L->w13_e;
        const uint16_t *s = w13_s + e * L->s13_e;
        uint32_t *dq = L->w13 + e * L->w13_e;
        uint16_t *ds = L->s13 + e * L->s13_e;
        for (int st = 0; st < I / STRIP; st++) {
            for (int kb = 0; kb < KB13; kb++)
                for (int half = 0; half < 2; half++)
                    memcpy(dq + (((size_t) st * KB13 + kb) * 2 + half) * STRIP,
                           q + (size_t) kb * 2 * I + half * I + st * STRIP, STRIP * 4);
            for (int g = 0; g < GB13; g++)
                for (int half = 0; half < 2; half++)
                    memcpy(ds + (((size_t) st * GB13 + g) * 2 + half) * STRIP,
                           s + (size_t) g * 2 * I + half * I + st * STRIP, STRIP * 2);
        }
        q = w2_q + e * L->w2_e;
        s = w2_s + e * L->s2_e;
        dq = L->w2 + e * L->w2_e;
        ds = L->s2 + e * L->s2_e;
        for (int st = 0; st < H / STRIP; st++) {
            for (int kb = 0; kb < KB2; kb++)
                memcpy(dq + ((size_t) st * KB2 + kb) * STRIP, q + (size_t) kb * H + st * STRIP, STRIP * 4);
            for (int g = 0; g < GB2; g++)
                memcpy(ds + ((size_t) st * GB2 + g) * STRIP, s + (size_t) g * H + st * STRIP, STRIP * 2);
        }
    }
}

// ---------------------------------------------------------------------------------------------------- kernels
// Each token's sum runs in CHAINS independent accumulators (a projection's nibble j goes to j % CHAINS), summed at each
// group's end: one chain of FMAs is bound by the FMA's latency (8 dependent FMAs a word), not by the loads; with one
// token that had held a core to ~10 GB/s on the dev host's Zen 4. CHAINS13 / CHAINS2 fill ~8 chains (AVX-512's 32
// registers) or ~4 (AVX2's 16, each 16-wide vector two of them) with the token count's own.
#if defined(__AVX512F__)
#define ILP 4
#else
#define ILP 2
#endif
#define CHAINS13(nt) ((nt) >= ILP ? 1 : ILP / (nt))
#define CHAINS2(nt) ((nt) >= 2 * ILP ? 1 : 2 * ILP / (nt))

// gate and up of one strip for nt <= TCHUNK inputs: q [KB][2][16], s [KB / (G / 8)][2][16]; og/ou [nt][16]; xs the
// inputs (scaled by XSCALE where OFFSET_IN_SUMS), sums each input's group sums (read where OFFSET_IN_SUMS)
static inline __attribute__((always_inline)) void strip13(const uint32_t *q, const uint16_t *s, int KB, int GB8,
                                                           const float *const *xs, const float *const *sums, int nt,
                                                           v16f *og, v16f *ou) {
    const int C = CHAINS13(nt);
#if !OFFSET_IN_SUMS
    (void) sums;
#endif
    vf tg[TCHUNK][NV], tu[TCHUNK][NV];
    for (int t = 0; t < nt; t++)
        for (int h = 0; h < NV; h++) tg[t][h] = tu[t][h] = (vf){0};
    for (int k0 = 0, g = 0; k0 < KB; k0 += GB8, g++) {
        vf pg[ILP][TCHUNK][NV], pu[ILP][TCHUNK][NV];
        for (int c = 0; c < C; c++)
            for (int t = 0; t < nt; t++)
                for (int h = 0; h < NV; h++) pg[c][t][h] = pu[c][t][h] = (vf){0};
        for (int kb = k0; kb < k0 + GB8; kb++) {
            __builtin_prefetch(q + (size_t) (kb + 16) * 2 * STRIP);
            __builtin_prefetch(q + (size_t) (kb + 16) * 2 * STRIP + STRIP);
            for (int h = 0; h < NV; h++) {
                vu qg, qu;
                memcpy(&qg, q + (size_t) kb * 2 * STRIP + h * W, W * 4);
                memcpy(&qu, q + (size_t) kb * 2 * STRIP + STRIP + h * W, W * 4);
                for (int j = 0; j < PACK; j++) {
                    vf wg = nibbles(qg, j), wu = nibbles(qu, j);
                    for (int t = 0; t < nt; t++) {
                        float xv = xs[t][kb * PACK + j];
                        pg[j % C][t][h] += xv * wg;
                        pu[j % C][t][h] += xv * wu;
                    }
                }
            }
        }
        for (int h = 0; h < NV; h++) {
            vf sg = scales_w(s + (size_t) g * 2 * STRIP + h * W), su = scales_w(s + (size_t) g * 2 * STRIP + STRIP + h * W);
            for (int t = 0; t < nt; t++) {
                for (int c = 1; c < C; c++) {
                    pg[0][t][h] += pg[c][t][h];
                    pu[0][t][h] += pu[c][t][h];
                }
#if OFFSET_IN_SUMS
                const float off = 8.0f * sums[t][g];
                pg[0][t][h] -= off;
                pu[0][t][h] -= off;
#endif
                tg[t][h] += pg[0][t][h] * sg;
                tu[t][h] += pu[0][t][h] * su;
            }
        }
    }
    for (int t = 0; t < nt; t++) {
        memcpy(&og[t], tg[t], 64);
        memcpy(&ou[t], tu[t], 64);
    }
}

// down of one strip for nt inputs: q [KB][16], s [KB / (G / 8)][16]; o [nt][16]; xs and sums as strip13's
static inline __attribute__((always_inline)) void strip2(const uint32_t *q, const uint16_t *s, int KB, int GB8,
                                                          const float *const *xs, const float *const *sums, int nt,
                                                          v16f *o) {
    const int C = CHAINS2(nt);
#if !OFFSET_IN_SUMS
    (void) sums;
#endif
    vf to[TCHUNK][NV];
    for (int t = 0; t < nt; t++)
        for (int h = 0; h < NV; h++) to[t][h] = (vf){0};
    for (int k0 = 0, g = 0; k0 < KB; k0 += GB8, g++) {
        vf p[2 * ILP][TCHUNK][NV];
        for (int c = 0; c < C; c++)
            for (int t = 0; t < nt; t++)
                for (int h = 0; h < NV; h++) p[c][t][h] = (vf){0};
        for (int kb = k0; kb < k0 + GB8; kb++) {
            __builtin_prefetch(q + (size_t) (kb + 16) * STRIP);
            for (int h = 0; h < NV; h++) {
                vu qq;
                memcpy(&qq, q + (size_t) kb * STRIP + h * W, W * 4);
                for (int j = 0; j < PACK; j++) {
                    vf w = nibbles(qq, j);
                    for (int t = 0; t < nt; t++) p[j % C][t][h] += xs[t][kb * PACK + j] * w;
                }
            }
        }
        for (int h = 0; h < NV; h++) {
            vf sc = scales_w(s + (size_t) g * STRIP + h * W);
            for (int t = 0; t < nt; t++) {
                for (int c = 1; c < C; c++) p[0][t][h] += p[c][t][h];
#if OFFSET_IN_SUMS
                p[0][t][h] -= 8.0f * sums[t][g];
#endif
                to[t][h] += p[0][t][h] * sc;
            }
        }
    }
    for (int t = 0; t < nt; t++) memcpy(&o[t], to[t], 64);
}

// one specialisation per token count, so each one's accumulators stay in registers
#define STRIP13_N(n) static void strip13_##n(const uint32_t *q, const uint16_t *s, int KB, int GB8, \
                                             const float *const *xs, const float *const *sums, v16f *og, \
                                             v16f *ou) { strip13(q, s, KB, GB8, xs, sums, n, og, ou); }
#define STRIP2_N(n) static void strip2_##n(const uint32_t *q, const uint16_t *s, int KB, int GB8, \
                                           const float *const *xs, const float *const *sums, v16f *o) { \
        strip2(q, s, KB, GB8, xs, sums, n, o); }
STRIP13_N(1) STRIP13_N(2) STRIP2_N(1) STRIP2_N(2)
#if TCHUNK == 4
STRIP13_N(3) STRIP13_N(4) STRIP2_N(3) STRIP2_N(4)
#endif

static void run13(int nt, const uint32_t *q, const uint16_t *s, int KB, int GB8, const float *const *xs,
                  const float *const *sums, v16f *og, v16f *ou) {
    switch (nt) {
    case 1: strip13_1(q, s, KB, GB8, xs, sums, og, ou); break;
    case 2: strip13_2(q, s, KB, GB8, xs, sums, og, ou); break;
#if TCHUNK == 4
    case 3: strip13_3(q, s, KB, GB8, xs, sums, og, ou); break;
    case 4: strip13_4(q, s, KB, GB8, xs, sums, og, ou); break;
#endif
    }
}

static void run2(int nt, const uint32_t *q, const uint16_t *s, int KB, int GB8, const float *const *xs,
                 const float *const *sums, v16f *o) {
    switch (nt) {
    case 1: strip2_1(q, s, KB, GB8, xs, sums, o); break;
    case 2: strip2_2(q, s, KB, GB8, xs, sums, o); break;
#if TCHUNK == 4
    case 3: strip2_3(q, s, KB, GB8, xs, sums, o); break;
    case 4: strip2_4(q, s, KB, GB8, xs, sums, o); break;
#endif
    }
}

// ---------------------------------------------------------------------------------------------------- a call
typedef struct v4_job {
    v4_layer *L;
    int n;
    const float *x;        // [n][H]
    const int32_t *ids;    // [n][K]
    const float *w;        // [n][K]
    float *out;            // [n][H]
    // per call: the distinct experts, the slots (t * K + k) naming each, and gate/up's output per slot
    int nd;
    int *dexp, *dstart, *dslots, *dpos, *emap;
    float *h;              // [n * K][I] (scaled by XSCALE where OFFSET_IN_SUMS)
    // OFFSET_IN_SUMS: the inputs scaled by XSCALE and their group sums; each slot's h summed by 8 columns (phase 1,
    // a unit each strip) and by group (the caller, between the phases)
    float *xq;             // [n][H]
    float *xsum;           // [n][H / G]
    float *hpart;          // [n * K][I / 8]
    float *hsum;           // [n * K][I / G]
    float *part;           // [n * K][H]: each slot's weighted down output (phase 2), summed per token in phase 3
    // v4_start / v4_wait: how many times the job was started, and up to which start the coordinator has written its
    // output (a start made while an earlier one still runs is waited for by its own number)
    _Atomic uint32_t started, finished;
    _Atomic int waiting;   // a v4_wait asleep on `finished` (await_gen's count): the coordinator wakes it
} v4_job;

static inline float silu(float g) { return g / (1.0f + __builtin_expf(-g)); }

static void unit13(void *arg, int u) {
    v4_job *j = arg;
    v4_layer *L = j->L;
    const int strips = L->I / STRIP, d = u / strips, st = u % strips, e = j->dexp[d];
    const uint32_t *q = L->w13 + e * L->w13_e + (size_t) st * (L->H / PACK) * 2 * STRIP;
    const uint16_t *s = L->s13 + e * L->s13_e + (size_t) st * (L->H / L->G) * 2 * STRIP;
    for (int a = j->dstart[d]; a < j->dstart[d + 1]; a += TCHUNK) {
        int nt = j->dstart[d + 1] - a < TCHUNK ? j->dstart[d + 1] - a : TCHUNK;
        const float *xs[TCHUNK], *sums[TCHUNK];
        for (int t = 0; t < nt; t++) {
            const size_t tok = (size_t) (j->dslots[a + t] / L->K);
            xs[t] = (OFFSET_IN_SUMS ? j->xq : j->x) + tok * L->H;
            sums[t] = j->xsum + tok * (L->H / L->G);
        }
        v16f og[TCHUNK], ou[TCHUNK];
        run13(nt, q, s, L->H / PACK, L->G / PACK, xs, sums, og, ou);
        for (int t = 0; t < nt; t++) {
            const size_t slot = (size_t) j->dslots[a + t];
            float *h = j->h + slot * L->I + st * STRIP;
#if OFFSET_IN_SUMS
            float part[STRIP / PACK] = {0};
            for (int c = 0; c < STRIP; c++) {
                const float v = silu(og[t][c]) * ou[t][c];
                part[c / PACK] += v;
                h[c] = v * XSCALE[c % PACK];
            }
            memcpy(j->hpart + slot * (L->I / PACK) + st * (STRIP / PACK), part, sizeof part);
#else
            for (int c = 0; c < STRIP; c++) h[c] = silu(og[t][c]) * ou[t][c];
#endif
        }
    }
}

// phase 2: down for one expert's slots over STRIPS2 consecutive output strips, its weights read as one contiguous run
// (an expert's strips of w2 lie one after the other: 48 KB for Qwen3-30B-A3B), each slot's share weighted into `part`.
// Units of one output strip over every expert, as before, read 6 KB from each of the batch's experts in turn: on the
// dev machine's one core that phase ran at half the first one's rate, the access pattern and not the arithmetic
#define STRIPS2 8
static inline int down_groups(const v4_layer *L) { return (L->H / STRIP + STRIPS2 - 1) / STRIPS2; }   // units / expert

static void unit2(void *arg, int u) {
    v4_job *j = arg;
    v4_layer *L = j->L;
    const int groups = down_groups(L), d = u / groups, g = u % groups;
    const int st0 = g * STRIPS2, st1 = st0 + STRIPS2 < L->H / STRIP ? st0 + STRIPS2 : L->H / STRIP;
    const int e = j->dexp[d];
    for (int st = st0; st < st1; st++) {
        const uint32_t *q = L->w2 + e * L->w2_e + (size_t) st * (L->I / PACK) * STRIP;
        const uint16_t *s = L->s2 + e * L->s2_e + (size_t) st * (L->I / L->G) * STRIP;
        for (int a = j->dstart[d]; a < j->dstart[d + 1]; a += TCHUNK) {
            int nt = j->dstart[d + 1] - a < TCHUNK ? j->dstart[d + 1] - a : TCHUNK;
            const float *hs[TCHUNK], *sums[TCHUNK];
            for (int t = 0; t < nt; t++) {
                hs[t] = j->h + (size_t) j->dslots[a + t] * L->I;
                sums[t] = j->hsum + (size_t) j->dslots[a + t] * (L->I / L->G);
            }
            v16f o[TCHUNK];
            run2(nt, q, s, L->I / PACK, L->G / PACK, hs, sums, o);
            for (int t = 0; t < nt; t++) {
                const int slot = j->dslots[a + t];
                v16f r = j->w[slot] * o[t];
                memcpy(j->part + (size_t) slot * L->H + st * STRIP, &r, 64);
            }
        }
    }
}

// phase 3: each token's output strip, its slots' weighted shares summed in slot order (a masked slot adds nothing):
// the same sum whichever thread ran which unit
static void unit3(void *arg, int st) {
    v4_job *j = arg;
    v4_layer *L = j->L;
    for (int t = 0; t < j->n; t++) {
        v16f acc = (v16f){0};
        for (int k = 0; k < L->K; k++) {
            const int slot = t * L->K + k, e = j->ids[slot];
            if (e < 0 || e >= L->E) continue;
            v16f v;
            memcpy(&v, j->part + (size_t) slot * L->H + st * STRIP, 64);
            acc += v;
        }
        memcpy(j->out + (size_t) t * L->H + st * STRIP, &acc, 64);
    }
}

// a call's pinned buffers, fixed when CUDA captures it (NULL where n is outside 1..MAX_TOKENS)
v4_job *v4_job_new(v4_layer *L, int n, const float *x, const int32_t *ids, const float *w, float *out) {
    if (n < 1 || n > MAX_TOKENS) return NULL;
    v4_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    size_t slots = (size_t) n * L->K;
    *j = (v4_job){.L = L, .n = n, .x = x, .ids = ids, .w = w, .out = out};
    j->dexp = malloc(slots * sizeof(int));
    j->dstart = malloc((slots + 1) * sizeof(int));
    j->dslots = malloc(slots * sizeof(int));
    j->dpos = malloc(slots * sizeof(int));
    j->emap = malloc((size_t) L->E * sizeof(int));
    j->h = big_alloc(slots * L->I * sizeof(float));
    j->xq = malloc((size_t) n * L->H * sizeof(float));
    j->xsum = malloc((size_t) n * (L->H / L->G) * sizeof(float));
    j->hpart = malloc(slots * (L->I / PACK) * sizeof(float));
    j->hsum = malloc(slots * (L->I / L->G) * sizeof(float));
    j->part = malloc(slots * L->H * sizeof(float));
    if (!j->dexp || !j->dstart || !j->dslots || !j->dpos || !j->emap || !j->h || !j->xq || !j->xsum || !j->hpart
        || !j->hsum || !j->part) {
        free(j->dexp); free(j->dstart); free(j->dslots); free(j->dpos); free(j->emap); free(j->h);
        free(j->xq); free(j->xsum); free(j->hpart); free(j->hsum); free(j->part); free(j);
        return NULL;
    }
    return j;
}

#if OFFSET_IN_SUMS
// before phase 1, on the caller: each token's input scaled by XSCALE, and its sum over each group of G inputs
static void scale_inputs(v4_job *j) {
    const v4_layer *L = j->L;
    for (int t = 0; t < j->n; t++) {
        const float *x = j->x + (size_t) t * L->H;
        float *xq = j->xq + (size_t) t * L->H, *sum = j->xsum + (size_t) t * (L->H / L->G);
        for (int g = 0; g < L->H / L->G; g++) {
            float acc = 0.0f;
            for (int k = g * L->G; k < (g + 1) * L->G; k++) {
                acc += x[k];
                xq[k] = x[k] * XSCALE[k % PACK];
            }
            sum[g] = acc;
        }
    }
}

// between the phases, on the caller: each slot's h summed over each group of G (from phase 1's sums of 8 columns)
static void h_group_sums(v4_job *j) {
    const v4_layer *L = j->L;
    const int per = L->G / PACK;
    for (int a = 0; a < j->dstart[j->nd]; a++) {
        const size_t slot = (size_t) j->dslots[a];
        const float *part = j->hpart + slot * (L->I / PACK);
        float *sum = j->hsum + slot * (L->I / L->G);
        for (int g = 0; g < L->I / L->G; g++) {
            float acc = 0.0f;
            for (int b = g * per; b < (g + 1) * per; b++) acc += part[b];
            sum[g] = acc;
        }
    }
}
#endif

// the host function: the job's inputs are in its pinned buffers (the stream copied them before this node)
void v4_run(void *arg) {
    v4_job *j = arg;
    v4_layer *L = j->L;
    v4_pool *p = L->pool;
    const int n = j->n, K = L->K, E = L->E;
    pthread_mutex_lock(&p->run_lock);
    static __thread int pinned_to = -1;       // this thread's pin, once made
    if (p->caller_cpu >= 0 && pinned_to != p->caller_cpu && pin_self(p->caller_cpu) == 0) pinned_to = p->caller_cpu;
    double t0 = now_ms(), spread = 0.0;
    const int cpu = sched_getcpu();
    for (int i = 0; i < p->n_workers; i++)
        if (p->cpus[i] >= 0 && p->cpus[i] == cpu) {
            p->win_clash++;
            break;
        }
    // the distinct experts of the batch, in order of first use, and the slots naming each (counting sort)
    for (int e = 0; e < E; e++) j->emap[e] = -1;
    int nd = 0;
    for (int i = 0; i < n * K; i++) {
        int e = j->ids[i];
        if (e < 0 || e >= E) continue;
        if (j->emap[e] < 0) {
            j->emap[e] = nd;
            j->dexp[nd] = e;
            j->dstart[nd + 1] = 0;
            nd++;
        }
        j->dstart[j->emap[e] + 1]++;
    }
    j->dstart[0] = 0;
    for (int d = 0; d < nd; d++) j->dstart[d + 1] += j->dstart[d];
    for (int d = 0; d < nd; d++) j->dpos[d] = j->dstart[d];
    for (int i = 0; i < n * K; i++) {
        int e = j->ids[i];
        if (e >= 0 && e < E) j->dslots[j->dpos[j->emap[e]]++] = i;
    }
    j->nd = nd;
    if (nd > 0) {
#if OFFSET_IN_SUMS
        scale_inputs(j);
#endif
        spread += dispatch(p, unit13, j, nd * (L->I / STRIP));
#if OFFSET_IN_SUMS
        h_group_sums(j);
#endif
        spread += dispatch(p, unit2, j, nd * down_groups(L));
        spread += dispatch(p, unit3, j, L->H / STRIP);
    } else {
        memset(j->out, 0, sizeof(float) * (size_t) n * L->H);
    }
    double t1 = now_ms();
    p->calls++;
    p->win_calls++;
    p->win_ms += t1 - t0;
    p->win_spread_ms += spread;
    if (p->last_end > 0 && t0 - p->last_end < 50.0) {
        p->win_gaps++;
        p->win_gap_ms += t0 - p->last_end;
    }
    p->last_end = t1;
    if (p->report_every > 0 && p->win_calls >= p->report_every) {
        fprintf(stderr, "vramkit_int4_experts: calls %ld-%ld: %.3f ms a call computing on %d threads (%s), %.3f ms "
                "between calls (%ld gaps under 50 ms), threads finishing %.3f ms apart a call, the caller on a "
                "worker's CPU in %ld calls\n", p->calls - p->win_calls + 1, p->calls,
                p->win_ms / p->win_calls, p->n_workers + 1, ISA, p->win_gaps ? p->win_gap_ms / p->win_gaps : 0.0,
                p->win_gaps, p->win_spread_ms / p->win_calls, p->win_clash);
        p->win_calls = p->win_gaps = p->win_clash = 0;
        p->win_ms = p->win_gap_ms = p->win_spread_ms = 0.0;
    }
    pthread_mutex_unlock(&p->run_lock);
}

// ---------------------------------------------------------------------------------------------------- a call in halves
// v4_start (a host function) hands the job to the pool's coordinator thread and returns, so the stream goes on to the
// GPU's share of the layer (the adapter's VRAMKIT_INT4_GPU_SHARE: some experts' slots computed by marlin reading their
// weights from pinned host RAM over the bus); v4_wait (the next host function) returns once the job's output is
// written. The coordinator runs v4_run as its caller, so the result and the log window are v4_run's.
static void *coordinator(void *arg) {
    v4_pool *p = arg;
    uint32_t seen = 0;
    for (;;) {
        v4_job *j = atomic_exchange(&p->posted, NULL);
        if (j) {
            const uint32_t n = atomic_load(&j->started);
            v4_run(j);
            atomic_store(&j->finished, n);             // seq_cst: before the waiter check, as v4_wait's
            if (atomic_load(&j->waiting)) futex_wake(&j->finished);
            continue;  // look again before the stop: a job handed over before v4_pool_free still runs (one posted
                       // while this one ran was lost that way, 348 of 2,000 frees in a stress loop)
        }
        if (atomic_load(&p->coord_stop)) break;
        seen = await_gen(&p->post_gen, seen, &p->coord_sleeps, SPIN_MS);   // a post bumps it after posting: none is missed
    }
    return NULL;
}

// start the coordinator (once); 0 where it runs
int v4_pool_async(v4_pool *p) {
    if (p->coord_on) return 0;
    if (pthread_create(&p->coord, NULL, coordinator, p) != 0) return -1;
    p->coord_on = 1;
    return 0;
}

void v4_start(void *arg) {
    v4_job *j = arg;
    v4_pool *p = j->L->pool;
    atomic_fetch_add(&j->started, 1);
    void *none = NULL;
    while (!atomic_compare_exchange_weak(&p->posted, &none, (void *) j)) {   // the one before not taken yet
        none = NULL;
        cpu_relax();
    }
    atomic_fetch_add(&p->post_gen, 1);      // seq_cst: ordered before the sleeper check, as the worker's wake
    if (atomic_load(&p->coord_sleeps)) futex_wake(&p->post_gen);
}

// returns once the job's latest start has its output written: spinning WAIT_SPIN_MS, past any CPU layer's call measured
// in a server (0.2-1.0 ms, moe-vs-llamacpp-int4/r8/), so a call waits as the spinning version r8/ ran did; then
// asleep on the futex, so a host with fewer free cores than busy threads (the workers, the coordinator, this one)
// does not lose a core to this loop for longer
#define WAIT_SPIN_MS 5.0
void v4_wait(void *arg) {
    v4_job *j = arg;
    const uint32_t want = atomic_load(&j->started);
    for (uint32_t got = atomic_load_explicit(&j->finished, memory_order_acquire); (int32_t) (got - want) < 0;)
        got = await_gen(&j->finished, got, &j->waiting, WAIT_SPIN_MS);
}
