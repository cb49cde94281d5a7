/*
 * Shared by the varlen attention kernels (varlen_attention.c, varlen_attention_bf16.c): on top of
 * the VL-float vectors of layers/csrc/vec16.h, query-row blocking, horizontal reductions,
 * float32 <-> bfloat16, the problem and work-item descriptions, and the softmax step.
 */
#ifndef SGL_VARLEN_COMMON_H
#define SGL_VARLEN_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../csrc/vec16.h"

#if defined(__GNUC__) && !defined(__clang__)
/* Copy and zero loops here run over one head's row (~100 bytes): GCC would otherwise turn them
 * into memcpy/memset library calls, which cost more than the copies themselves. */
#pragma GCC optimize("no-tree-loop-distribute-patterns")
#endif

#define QROWS 4   /* query rows that share one pass over the keys */

enum { DTYPE_F32 = 0, DTYPE_BF16 = 1 };

/* Horizontal max and sum as a tree of vector shuffles (depth log2 VL), not a chain of scalar ops. */
#if VL == 16
static const vi LANE = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
#if defined(__clang__)
#define VSWAP(v, w) __builtin_shufflevector(v, v, 0 ^ (w), 1 ^ (w), 2 ^ (w), 3 ^ (w), 4 ^ (w), 5 ^ (w), \
                                            6 ^ (w), 7 ^ (w), 8 ^ (w), 9 ^ (w), 10 ^ (w), 11 ^ (w), \
                                            12 ^ (w), 13 ^ (w), 14 ^ (w), 15 ^ (w))
#endif
#elif VL == 8
static const vi LANE = {0, 1, 2, 3, 4, 5, 6, 7};
#if defined(__clang__)
#define VSWAP(v, w) __builtin_shufflevector(v, v, 0 ^ (w), 1 ^ (w), 2 ^ (w), 3 ^ (w), 4 ^ (w), 5 ^ (w), \
                                            6 ^ (w), 7 ^ (w))
#endif
#else
#error "VL must be 8 or 16"
#endif
#if !defined(__clang__)
#define VSWAP(v, w) __builtin_shuffle(v, LANE ^ (w))
#endif
static inline vi viota(int start) { return LANE + start; }
static inline float hmax(vf v) {
#if VL == 16
    v = vmax(v, VSWAP(v, 8));
#endif
    v = vmax(v, VSWAP(v, 4));
    v = vmax(v, VSWAP(v, 2));
    v = vmax(v, VSWAP(v, 1));
    return v[0];
}
static inline float hsum(vf v) {
#if VL == 16
    v += VSWAP(v, 8);
#endif
    v += VSWAP(v, 4);
    v += VSWAP(v, 2);
    v += VSWAP(v, 1);
    return v[0];
}

/* Transpose of a VL x VL tile held as VL vectors, in log2(VL) butterfly stages: stage h swaps
 * element (i, l) with (i + h, l - h) wherever bit h is clear in i and set in l, so after every
 * stage (i, l) sits at (l, i). VL^2 / 2 two-source shuffles where a scalar transpose needs VL^2
 * stores (the key staging's scalar transpose was ~7% of the kernel). The lane lists are integer
 * constant expressions, as both GCC's and Clang's shuffle builtins want. */
#define TLO(l, h) (((l) & (h)) ? VL + (l) - (h) : (l))
#define THI(l, h) (((l) & (h)) ? VL + (l) : (l) + (h))
#if VL == 16
#define TLANES(F, h) F(0, h), F(1, h), F(2, h), F(3, h), F(4, h), F(5, h), F(6, h), F(7, h), F(8, h), F(9, h), \
                     F(10, h), F(11, h), F(12, h), F(13, h), F(14, h), F(15, h)
#else
#define TLANES(F, h) F(0, h), F(1, h), F(2, h), F(3, h), F(4, h), F(5, h), F(6, h), F(7, h)
#endif
#if defined(__clang__)
#define TSHUFFLE(a, b, F, h) __builtin_shufflevector(a, b, TLANES(F, h))
#else
#define TSHUFFLE(a, b, F, h) __builtin_shuffle(a, b, (vi){TLANES(F, h)})
#endif
#define TSTAGE(t, h)                                                \
    for (int i = 0; i < VL; i++)                                    \
        if (!(i & (h))) {                                           \
            vf lo_ = TSHUFFLE(t[i], t[i + (h)], TLO, h);            \
            t[i + (h)] = TSHUFFLE(t[i], t[i + (h)], THI, h);        \
            t[i] = lo_;                                             \
        }
static inline void vtranspose(vf *t) {
#if VL == 16
    TSTAGE(t, 8)
#endif
    TSTAGE(t, 4)
    TSTAGE(t, 2)
    TSTAGE(t, 1)
}

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t f32_to_bf16(float f) { /* round to nearest even, as torch does */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline void load_f32(const void *base, int dtype, int64_t off, int n, float *dst) {
    if (dtype == DTYPE_BF16) {
        const uint16_t *src = (const uint16_t *)base + off;
        for (int d = 0; d < n; d++) dst[d] = bf16_to_f32(src[d]);
    } else { /* a loop, not memcpy: rows are ~100 bytes, too short to pay for a library call */
        const float *src = (const float *)base + off;
        for (int d = 0; d < n; d++) dst[d] = src[d];
    }
}

static inline void store_from_f32(void *base, int dtype, int64_t off, int n, const float *src) {
    if (dtype == DTYPE_BF16) {
        uint16_t *dst = (uint16_t *)base + off;
        for (int d = 0; d < n; d++) dst[d] = f32_to_bf16(src[d]);
    } else {
        float *dst = (float *)base + off;
        for (int d = 0; d < n; d++) dst[d] = src[d];
    }
}

static inline int round_up(int x, int m) { return (x + m - 1) / m * m; }

typedef struct {
    const void *q, *k, *v;
    void *out;
    int dtype, head_dim, head_dim_pad, group; /* group: query heads per kv head */
    int64_t q_stride, k_stride, v_stride, o_stride;
    float scale;
    int causal, window;
    /* Optional additive score bias that depends on the key's position relative to the query's
     * (MPNet's relative position buckets): score(h, i, j) += bias[h * bias_stride + bias_center + j - i].
     * NULL: none. The caller sizes each head's row to cover every j - i of the batch plus one
     * vector (VL) of slack, so a whole vector of keys past a sequence's end stays in bounds. */
    const float *bias;
    int64_t bias_stride;
    int64_t bias_center;
    /* Optional per-sequence key counts: query rows of sequence b attend only its first key_lens[b]
     * tokens (ColBERT's query expansion tokens are queries but never keys). NULL: every token. */
    const int32_t *key_lens;
} Problem;

/* One item's rows in float32. Sizes are capacities, fixed per thread for the whole call. */
typedef struct {
    float *kt;     /* [kv heads][head_dim][key_cap]: keys transposed, so scores vectorise over keys */
    float *vals;   /* [kv heads][key_cap][head_dim_pad]: values, zero-padded to whole vectors */
    float *qs;     /* [row_cap][heads * head_dim]: queries times the scale */
    float *os;     /* [row_cap][heads * head_dim]: output rows */
    float *probs;  /* [QROWS][key_cap]: scores, then probabilities */
    float *acc;    /* [QROWS][head_dim_pad]: one head's output for four rows */
    uint16_t *pbf; /* [QROWS][key_cap]: probabilities in bfloat16 (the bf16 dot-product path) */
    int key_cap;
} Scratch;

static inline int scratch_init(Scratch *s, int max_keys, int max_rows, int heads, int kv_heads, int D, int Dp) {
    s->key_cap = round_up(max_keys > 0 ? max_keys : 1, VL);
    size_t kt = (size_t)kv_heads * D * s->key_cap, vals = (size_t)kv_heads * s->key_cap * Dp;
    size_t rows = (size_t)max_rows * heads * D;
    size_t probs = (size_t)QROWS * s->key_cap, acc = (size_t)QROWS * Dp;
    size_t total = kt + vals + 2 * rows + 2 * probs + acc;
    size_t bytes = (total * sizeof(float) + 63) / 64 * 64; /* aligned_alloc wants whole alignments */
    float *mem = aligned_alloc(64, bytes);
    if (!mem) return -1;
    s->kt = mem;
    s->vals = s->kt + kt;
    s->qs = s->vals + vals;
    s->os = s->qs + rows;
    s->probs = s->os + rows;
    s->acc = s->probs + probs;
    s->pbf = (uint16_t *)(s->acc + acc);
    return 0;
}

/* Key range [lo, hi) that query row i may attend, in a sequence whose first `keys` tokens are
 * keys (its length, unless key_lens says fewer). */
static inline void key_range(const Problem *p, int i, int keys, int *lo, int *hi) {
    *lo = (p->window > 0 && i - p->window + 1 > 0) ? i - p->window + 1 : 0;
    *hi = p->causal ? i + 1 : keys;
    if (*hi > keys) *hi = keys;
    if (p->window > 0 && i + p->window < *hi) *hi = i + p->window;
    if (*lo >= *hi) *lo = *hi > 0 ? *hi - 1 : 0; /* never an empty row: a window past the keys keeps the last */
}

/* What one work item covers: query rows [r0, r1) of the sequence at packed row `start`, keys
 * [j0, j1) of it, query heads [h0, h1) and the kv heads [kh0, kh1) they read. */
typedef struct {
    int64_t start;
    int len, keys, r0, r1, j0, j1, h0, h1, kh0, kh1; /* keys: tokens that may be attended (<= len) */
} Item;

/* Store one vector of four rows' scores, -inf where a row may not attend, tracking row maxima.
 * Vectors wholly inside every row's allowed keys (all but the edges, usually) skip the masking. */
static inline void mask_scores(float *probs, int np, int jb, const vf *acc, const int *lo, const int *hi,
                               vf *rowmax) {
    int inside = 1;
    for (int rr = 0; rr < QROWS; rr++) inside &= (jb >= lo[rr]) & (jb + VL <= hi[rr]);
    if (inside) {
        for (int rr = 0; rr < QROWS; rr++) {
            rowmax[rr] = vmax(rowmax[rr], acc[rr]);
            vstore(probs + (size_t)rr * np + jb, acc[rr]);
        }
        return;
    }
    vi idx = viota(jb);
    for (int rr = 0; rr < QROWS; rr++) {
        vf sc = vselect((idx >= lo[rr]) & (idx < hi[rr]), acc[rr], vsplat(-INFINITY));
        rowmax[rr] = vmax(rowmax[rr], sc);
        vstore(probs + (size_t)rr * np + jb, sc);
    }
}

/* Softmax of four rows of scores in place (masked keys hold -inf, so their probability is 0);
 * returns each row's 1 / sum, applied to the weighted sum of values afterwards. `coarse`: see vexp. */
static inline void softmax_rows(float *probs, int np, const vf *rowmax, float *inv_sum, int coarse) {
    for (int rr = 0; rr < QROWS; rr++) {
        float *prow = probs + (size_t)rr * np;
        float mx = hmax(rowmax[rr]);
        vf sum = vsplat(0.0f);
        for (int jb = 0; jb < np; jb += VL) {
            vf e = vexp(vload(prow + jb) - mx, coarse);
            vstore(prow + jb, e);
            sum += e;
        }
        inv_sum[rr] = 1.0f / hsum(sum);
    }
}

/* Row ranges of one group of QROWS query rows starting at item row r: each row's query offset in
 * scratch and its allowed keys [lo, hi) relative to the item's first key. Spare lanes of a short
 * last group repeat its last row. Returns the number of real rows. */
static inline int row_group(const Problem *p, const Item *it, int r, int *qrow, int *lo, int *hi) {
    int rows = it->r1 - r < QROWS ? it->r1 - r : QROWS;
    for (int rr = 0; rr < QROWS; rr++) {
        int i = r + (rr < rows ? rr : rows - 1);
        qrow[rr] = i - it->r0;
        key_range(p, i, it->keys, &lo[rr], &hi[rr]);
        lo[rr] -= it->j0;
        hi[rr] -= it->j0;
    }
    return rows;
}

/* Add the position bias of one head to a vector of four rows' scores (keys jb .. jb + VL - 1 of
 * the item, rows r .. r + 3 with a short last group repeating its last row, as row_group does). */
static inline void add_position_bias(const Problem *p, const Item *it, int head, int r, int rows, int jb, vf *scores) {
    const float *row = p->bias + (int64_t)head * p->bias_stride + p->bias_center + it->j0 + jb;
    for (int rr = 0; rr < QROWS; rr++) scores[rr] += vload(row - (r + (rr < rows ? rr : rows - 1)));
}

/* Keys [*jlo, *jhi) that any of the group's rows may attend (the weighted sum's loop bounds). */
static inline void group_key_span(const int *lo, const int *hi, int *jlo, int *jhi) {
    *jlo = lo[0];
    *jhi = hi[0];
    for (int rr = 1; rr < QROWS; rr++) {
        *jlo = lo[rr] < *jlo ? lo[rr] : *jlo;
        *jhi = hi[rr] > *jhi ? hi[rr] : *jhi;
    }
}

/* Move the group's finished rows of one head from s->acc to the item's output rows. */
static inline void keep_head_rows(const Problem *p, Scratch *s, const Item *it, int r, int rows, int head) {
    const int D = p->head_dim, Dp = p->head_dim_pad, nq = (it->h1 - it->h0) * D;
    for (int rr = 0; rr < rows; rr++) {
        float *orow = s->os + (size_t)(r + rr - it->r0) * nq + (size_t)(head - it->h0) * D;
        for (int d = 0; d < D; d++) orow[d] = s->acc[(size_t)rr * Dp + d];
    }
}

#if defined(__AVX512BF16__) && defined(__AVX512F__)
/* bfloat16 inputs on CPUs with avx512_bf16 (varlen_attention_bf16.c): stage and attend one item
 * with bf16 dot products, leaving float32 output rows in s->os like the float32 path. */
#define SGL_HAVE_BF16DP 1
void bf16dp_attend_item(const Problem *p, Scratch *s, const Item *it);
#endif

#endif
