// llama.cpp's CPU MoE kernels (ggml) behind SGLang's KT wrapper: the CPU half of a layer whose experts all sit in host
// RAM, computed as llama.cpp computes it (issue 18). vramkit_ggml_experts.py loads this with ctypes and launches
// vk_run as a CUDA host function on SGLang's stream (cuLaunchHostFunc), the way kt-kernel's submit_with_cuda_stream
// does, so CUDA graphs capture it: at replay a CUDA driver thread calls vk_run directly, no Python and no GIL.
//
// One engine a process (a ggml CPU backend on one persistent thread pool), one vk_layer a MoE layer (its three expert
// tensors in the buffer type llama.cpp would give them: CPU_REPACK where ggml has a repacked kernel for the type on
// this CPU, else the plain CPU buffer), one graph a (layer, token count), built at its first call: llama.cpp's
// build_moe_ffn node list for a Qwen3-MoE layer (mul_mat_id up and gate, swiglu, mul_mat_id down, the routing
// weights, the sum over the top-k). A job is one (layer, token count) call's pinned buffers, fixed when CUDA captures
// it: x [n, hidden] f32 in, ids [n, top-k] i32 and routing weights [n, top-k] f32 in, out [n, hidden] f32 out.
//
// Build (benchmarks/gpu/build_ggml.sh DIR experts): cc -O2 -shared -fPIC ggml_experts.c -I llama.cpp/ggml/include
//   -L DIR/lib-native -lggml-base -lggml-cpu -Wl,-rpath,'$ORIGIN' -o DIR/lib-native/libvramkit_ggml_experts.so
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

#define VK_MAX_TOKENS 64   // graphs kept per layer: token counts 1..VK_MAX_TOKENS (decode batches)
#define VK_MAX_EXPERTS 1024

typedef struct vk_engine {
    ggml_backend_t backend;
    struct ggml_threadpool *pool;
    ggml_backend_dev_t dev;
    ggml_backend_buffer_type_t repack;   // CPU_REPACK, or NULL where this build has none
    int n_threads;
    // statistics, for the server log's evidence lines: every vk_run, and a window of report_every calls (its compute
    // time, and the time from one call's end to the next call's start where under 50 ms: the GPU's share between
    // two CPU layers of a token, host-node hand-offs and copies included)
    long calls;
    double compute_ms;
    long report_every;
    long win_calls, win_gaps;
    double win_ms, win_gap_ms, last_end;
} vk_engine;

typedef struct vk_graph {
    struct ggml_context *ctx;
    struct ggml_cgraph *gf;
    ggml_gallocr_t galloc;
    struct ggml_tensor *x, *ids, *w, *out;
} vk_graph;

typedef struct vk_layer {
    vk_engine *eng;
    int n_expert, n_used, hidden, inter;
    struct ggml_context *wctx;
    ggml_backend_buffer_t bufs[3];
    struct ggml_tensor *t[3];            // gate [hidden, inter, E], up [hidden, inter, E], down [inter, hidden, E]
    int repacked[3];
    vk_graph graphs[VK_MAX_TOKENS + 1];
} vk_layer;

typedef struct vk_job {
    vk_layer *layer;
    int n;
    const float *x;
    const int32_t *ids;
    const float *w;
    float *out;
} vk_job;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

vk_engine *vk_engine_new(int n_threads, int use_repack, long report_every) {
    vk_engine *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->backend = ggml_backend_cpu_init();
    if (!e->backend) { free(e); return NULL; }
    struct ggml_threadpool_params p = ggml_threadpool_params_default(n_threads);
    e->pool = ggml_threadpool_new(&p);
    ggml_backend_cpu_set_n_threads(e->backend, n_threads);
    ggml_backend_cpu_set_threadpool(e->backend, e->pool);
    e->n_threads = n_threads;
    e->report_every = report_every;
    ggml_backend_reg_t reg = ggml_backend_cpu_reg();
    e->dev = ggml_backend_reg_dev_get(reg, 0);
    if (use_repack) {
        ggml_backend_dev_get_extra_bufts_t get =
            (ggml_backend_dev_get_extra_bufts_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
        for (ggml_backend_buffer_type_t *b = get ? get(e->dev) : NULL; b && *b; b++) {
            if (strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) e->repack = *b;
        }
    }
    return e;
}

// llama.cpp's weight_buft_supported: the op the weight feeds, with the weight in a zero-size buffer of buft
static int repack_supports(vk_engine *e, struct ggml_tensor *w, int n_used) {
    if (!e->repack) return 0;
    struct ggml_init_params ip = {ggml_tensor_overhead() * 8, NULL, 1};
    struct ggml_context *ctx = ggml_init(ip);
    struct ggml_tensor *b = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, w->ne[0], n_used, 1);
    struct ggml_tensor *ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, n_used, 1);
    struct ggml_tensor *op = ggml_mul_mat_id(ctx, w, b, ids);
    ggml_backend_buffer_t buf = ggml_backend_buft_alloc_buffer(e->repack, 0);
    struct ggml_backend_buffer *saved = w->buffer;
    w->buffer = buf;
    int ok = ggml_backend_dev_supports_op(e->dev, op);
    w->buffer = saved;
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    return ok;
}

// types: ggml_type of gate, up, down. Returns NULL where a buffer cannot be allocated.
vk_layer *vk_layer_new(vk_engine *e, int n_expert, int n_used, int hidden, int inter, int gate_type, int up_type,
                       int down_type) {
    if (n_expert > VK_MAX_EXPERTS || n_used >= n_expert) return NULL;
    vk_layer *L = calloc(1, sizeof *L);
    if (!L) return NULL;
    *L = (vk_layer){.eng = e, .n_expert = n_expert, .n_used = n_used, .hidden = hidden, .inter = inter};
    struct ggml_init_params ip = {ggml_tensor_overhead() * 4, NULL, 1};
    L->wctx = ggml_init(ip);
    int types[3] = {gate_type, up_type, down_type};
    for (int i = 0; i < 3; i++) {
        L->t[i] = i < 2 ? ggml_new_tensor_3d(L->wctx, types[i], hidden, inter, n_expert)
                        : ggml_new_tensor_3d(L->wctx, types[i], inter, hidden, n_expert);
        L->repacked[i] = repack_supports(e, L->t[i], n_used);
        ggml_backend_buffer_type_t buft = L->repacked[i] ? e->repack : ggml_backend_cpu_buffer_type();
        L->bufs[i] = ggml_backend_buft_alloc_buffer(buft, ggml_backend_buft_get_alloc_size(buft, L->t[i]));
        if (!L->bufs[i]) {               // out of host RAM: give back what this layer took
            for (int j = 0; j < i; j++) ggml_backend_buffer_free(L->bufs[j]);
            ggml_free(L->wctx);
            free(L);
            return NULL;
        }
        ggml_backend_tensor_alloc(L->bufs[i], L->t[i], ggml_backend_buffer_get_base(L->bufs[i]));
        ggml_backend_buffer_set_usage(L->bufs[i], GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    }
    return L;
}

// which: 0 gate, 1 up, 2 down; bytes: the tensor's blocks as a GGUF holds them (CPU_REPACK repacks them here)
int vk_layer_set(vk_layer *L, int which, const void *data, size_t nbytes) {
    if (which < 0 || which > 2 || nbytes != ggml_nbytes(L->t[which])) return -1;
    ggml_backend_tensor_set(L->t[which], data, 0, nbytes);
    return 0;
}

int vk_layer_repacked(vk_layer *L, int which) { return L->repacked[which]; }

static vk_graph *graph_for(vk_layer *L, int n) {
    vk_graph *g = &L->graphs[n];
    if (g->gf) return g;
    const int H = L->hidden, K = L->n_used;
    size_t n_nodes = 16 + 2 * (size_t) K;
    struct ggml_init_params ip = {ggml_tensor_overhead() * (n_nodes + 8) + ggml_graph_overhead_custom(n_nodes, 0), NULL, 1};
    struct ggml_context *ctx = ggml_init(ip);
    g->x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, H, n);
    g->ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, K, n);
    g->w = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 1, K, n);
    ggml_set_input(g->x);
    ggml_set_input(g->ids);
    ggml_set_input(g->w);
    struct ggml_tensor *x3 = ggml_reshape_3d(ctx, g->x, H, 1, n);
    struct ggml_tensor *up = ggml_mul_mat_id(ctx, L->t[1], x3, g->ids);     // [inter, K, n]
    struct ggml_tensor *gate = ggml_mul_mat_id(ctx, L->t[0], x3, g->ids);
    struct ggml_tensor *ex = ggml_mul_mat_id(ctx, L->t[2], ggml_swiglu_split(ctx, gate, up), g->ids);  // [H, K, n]
    ex = ggml_mul(ctx, ex, g->w);
    struct ggml_tensor *cur = ggml_view_2d(ctx, ex, H, n, ex->nb[2], 0);
    for (int k = 1; k < K; k++) cur = ggml_add(ctx, cur, ggml_view_2d(ctx, ex, H, n, ex->nb[2], k * ex->nb[1]));
    ggml_set_output(cur);
    g->out = cur;
    g->gf = ggml_new_graph_custom(ctx, n_nodes, 0);
    ggml_build_forward_expand(g->gf, cur);
    g->galloc = ggml_gallocr_new(ggml_backend_cpu_buffer_type());
    if (!ggml_gallocr_alloc_graph(g->galloc, g->gf)) {
        fprintf(stderr, "vramkit_ggml_experts: could not allocate the graph of %d tokens\n", n);
        abort();
    }
    g->ctx = ctx;
    return g;
}

vk_job *vk_job_new(vk_layer *L, int n, const float *x, const int32_t *ids, const float *w, float *out) {
    if (n < 1 || n > VK_MAX_TOKENS) return NULL;
    vk_job *j = calloc(1, sizeof *j);
    if (j) *j = (vk_job){.layer = L, .n = n, .x = x, .ids = ids, .w = w, .out = out};
    return j;
}

int vk_max_tokens(void) { return VK_MAX_TOKENS; }

// the host function: the job's inputs are in its pinned buffers (the stream copied them before this node)
void vk_run(void *arg) {
    vk_job *j = arg;
    vk_layer *L = j->layer;
    vk_engine *e = L->eng;
    const int n = j->n, K = L->n_used, E = L->n_expert;
    double t0 = now_ms();
    vk_graph *g = graph_for(L, n);
    memcpy(g->x->data, j->x, sizeof(float) * (size_t) n * L->hidden);
    int32_t *ids = g->ids->data;
    float *w = g->w->data;
    // a masked or padded slot (id -1) becomes an expert its row does not use, with weight 0: ggml's mul_mat_id gives
    // wrong rows (every row of the batch, not only this one) when one row names an expert twice (measured:
    // ggml_experts_check.py, 2026-11-27)
    unsigned char used[VK_MAX_EXPERTS];
    for (int t = 0; t < n; t++) {
        const int32_t *src = j->ids + (size_t) t * K;
        memset(used, 0, (size_t) E);
        for (int k = 0; k < K; k++) if (src[k] >= 0 && src[k] < E) used[src[k]] = 1;
        int spare = 0;
        for (int k = 0; k < K; k++) {
            int i = t * K + k;
            if (src[k] >= 0 && src[k] < E) {
                ids[i] = src[k];
                w[i] = j->w[i];
            } else {
                while (used[spare]) spare++;     // K < E: one is always left
                used[spare] = 1;
                ids[i] = spare;
                w[i] = 0.0f;
            }
        }
    }
    if (ggml_backend_graph_compute(e->backend, g->gf) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "vramkit_ggml_experts: graph compute failed\n");
        abort();
    }
    memcpy(j->out, g->out->data, sizeof(float) * (size_t) n * L->hidden);
    double t1 = now_ms();
    e->compute_ms += t1 - t0;
    e->calls++;
    e->win_calls++;
    e->win_ms += t1 - t0;
    if (e->last_end > 0 && t0 - e->last_end < 50.0) {
        e->win_gaps++;
        e->win_gap_ms += t0 - e->last_end;
    }
    e->last_end = t1;
    if (e->report_every > 0 && e->win_calls >= e->report_every) {
        fprintf(stderr, "vramkit_ggml_experts: calls %ld-%ld: %.3f ms a call computing on %d threads, %.3f ms between "
                "calls (%ld gaps under 50 ms)\n", e->calls - e->win_calls + 1, e->calls, e->win_ms / e->win_calls,
                e->n_threads, e->win_gaps ? e->win_gap_ms / e->win_gaps : 0.0, e->win_gaps);
        e->win_calls = e->win_gaps = 0;
        e->win_ms = e->win_gap_ms = 0.0;
    }
}

void vk_stats(vk_engine *e, long *calls, double *ms) {
    *calls = e->calls;
    *ms = e->compute_ms;
}
