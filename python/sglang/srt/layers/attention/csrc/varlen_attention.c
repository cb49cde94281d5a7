/*
 * Varlen attention over packed sequences on CPU, for embedding prefill.
 *
 * Why this exists: with the head sizes of embedding models (head_dim 32-128) and short sequences
 * (tens of tokens), torch's CPU flash kernel spends its time in per-block GEMM calls, not in
 * arithmetic (about a tenth of the matmul rate). Here one parallel loop covers the whole batch.
 * A work item is one row block of one sequence for a range of heads: it copies the rows it needs
 * into float32 scratch in address order (per-head slices of ~100 bytes a full row apart are what
 * the caches and prefetchers handle worst), then runs every head on that scratch, four query rows
 * per pass over the keys, and writes its output rows back whole.
 *
 * Layout: q is [T, num_heads * head_dim], k and v are [T, num_kv_heads * head_dim], each with its
 * own row stride (so q, k and v may be column slices of one fused projection); out is
 * [T, num_heads * head_dim]. Sequence b owns rows cu_seqlens[b] .. cu_seqlens[b+1]. Query row i of
 * a sequence may attend key j when (!causal || j <= i) && (window <= 0 || |i - j| < window), and
 * j < key_lens[b] when key counts are given; an optional per-head bias indexed by j - i is added
 * to the scores (MPNet's relative positions).
 * Storage is float32 or bfloat16; scores, softmax and sums are float32. For bfloat16 on CPUs with
 * avx512_bf16, varlen_attention_bf16.c takes over the two products (bf16 dot-product instructions).
 *
 * Portable C11 with GCC/Clang vector extensions: the compiler lowers the VL-float vector
 * (csrc/vec16.h) to one AVX-512 or AVX2 register, 2 x SSE or 4 x NEON. Threads come from the
 * OpenMP runtime the process already loaded (torch's), so no second thread pool competes with torch's.
 */
#include "varlen_common.h"

/* Keys of float32 storage, transposed into scratch a VL x VL tile at a time (vtranspose); tile
 * rows past the last key are zeros, which also pads every key row to whole vectors. Head dims
 * past the last whole tile go one by one. */
static void stage_keys_f32(const Problem *p, Scratch *s, const Item *it) {
    const int D = p->head_dim, nkv = it->kh1 - it->kh0;
    const int n = it->j1 - it->j0, np = round_up(n, VL), Dt = D / VL * VL;
    const float *k = (const float *)p->k;
    for (int kh = 0; kh < nkv; kh++) {
        float *kt = s->kt + (size_t)kh * D * s->key_cap;
        for (int jb = 0; jb < np; jb += VL) {
            const float *rows[VL];
            for (int jj = 0; jj < VL; jj++)
                rows[jj] = jb + jj < n ? k + (it->start + it->j0 + jb + jj) * p->k_stride + (int64_t)(it->kh0 + kh) * D
                                       : NULL;
            for (int d0 = 0; d0 < Dt; d0 += VL) {
                vf t[VL];
                for (int jj = 0; jj < VL; jj++) t[jj] = rows[jj] ? vload(rows[jj] + d0) : vsplat(0.0f);
                vtranspose(t);
                for (int dd = 0; dd < VL; dd++) vstore(kt + (size_t)(d0 + dd) * np + jb, t[dd]);
            }
            for (int d = Dt; d < D; d++)
                for (int jj = 0; jj < VL; jj++) kt[(size_t)d * np + jb + jj] = rows[jj] ? rows[jj][d] : 0.0f;
        }
    }
}

/* Keys of other storage (bfloat16 on CPUs without its dot products), converted a row at a time
 * and transposed one element at a time, then zeroed past the last key to whole vectors (their
 * scores are masked anyway). */
static void stage_keys_rows(const Problem *p, Scratch *s, const Item *it) {
    const int D = p->head_dim, nkv = it->kh1 - it->kh0;
    const int n = it->j1 - it->j0, np = round_up(n, VL);
    float *row = s->acc; /* a key row in transit (acc is free until the heads run) */
    for (int kh = 0; kh < nkv; kh++) {
        float *kt = s->kt + (size_t)kh * D * s->key_cap;
        for (int j = 0; j < n; j++) {
            load_f32(p->k, p->dtype, (it->start + it->j0 + j) * p->k_stride + (int64_t)(it->kh0 + kh) * D, D, row);
            for (int d = 0; d < D; d++) kt[(size_t)d * np + j] = row[d];
        }
        for (int d = 0; d < D; d++)
            for (int j = n; j < np; j++) kt[(size_t)d * np + j] = 0.0f;
    }
}

/* Copy the item's keys (transposed), values and scaled queries into scratch. */
static void stage(const Problem *p, Scratch *s, const Item *it) {
    const int D = p->head_dim, Dp = p->head_dim_pad, nkv = it->kh1 - it->kh0;
    const int n = it->j1 - it->j0, nq = (it->h1 - it->h0) * D;
    for (int j = 0; j < n; j++) {
        int64_t at = it->start + it->j0 + j;
        for (int kh = 0; kh < nkv; kh++) {
            float *vrow = s->vals + ((size_t)kh * s->key_cap + j) * Dp;
            load_f32(p->v, p->dtype, at * p->v_stride + (int64_t)(it->kh0 + kh) * D, D, vrow);
            for (int d = D; d < Dp; d++) vrow[d] = 0.0f;
        }
    }
    if (p->dtype == DTYPE_F32)
        stage_keys_f32(p, s, it);
    else
        stage_keys_rows(p, s, it);
    for (int i = it->r0; i < it->r1; i++) {
        float *qrow = s->qs + (size_t)(i - it->r0) * nq;
        load_f32(p->q, p->dtype, (it->start + i) * p->q_stride + (int64_t)it->h0 * D, nq, qrow);
        for (int e = 0; e < nq; e++) qrow[e] *= p->scale;
    }
}

/* a[r] += s[r] * u and b[r] += s[r] * w for the four rows: the step both products are made of,
 * eight independent FMA chains (enough to cover the FMA latency on CPUs with two vector FMA ports,
 * AVX2's ymm among them; four chains ran at half their rate). u and w are pinned in registers
 * (VKEEP): one load per vector, not one per FMA, which is what GCC otherwise emits. */
static inline void fma_rows_x2(vf *a, vf *b, vf u, vf w, const float *s0, const float *s1, const float *s2,
                               const float *s3) {
    VKEEP(u);
    VKEEP(w);
    vf x = vsplat(*s0);
    a[0] += x * u, b[0] += x * w;
    x = vsplat(*s1);
    a[1] += x * u, b[1] += x * w;
    x = vsplat(*s2);
    a[2] += x * u, b[2] += x * w;
    x = vsplat(*s3);
    a[3] += x * u, b[3] += x * w;
}

/* Scores of four query rows against every key vector, two key vectors per pass (fma_rows_x2):
 * masked, stored to probs, folded into the row maxima. Its own function, called once per row
 * group: inlined, GCC spilled these accumulators to keep the softmax's constants in registers. */
__attribute__((noinline)) static void score_rows(const Problem *p, const Item *it, const float *kt,
                                                 const float *const *qr, int head, int r, int rows, int np,
                                                 float *probs, const int *lo, const int *hi, vf *rowmax) {
    const int D = p->head_dim;
    const float *q0 = qr[0], *q1 = qr[1], *q2 = qr[2], *q3 = qr[3];
    int jb = 0;
    for (; jb + 2 * VL <= np; jb += 2 * VL) {
        vf a[QROWS], b[QROWS];
        for (int rr = 0; rr < QROWS; rr++) a[rr] = b[rr] = vsplat(0.0f);
        const float *kd = kt + jb;
        for (int d = 0; d < D; d++, kd += np) fma_rows_x2(a, b, vload(kd), vload(kd + VL), q0 + d, q1 + d, q2 + d, q3 + d);
        if (p->bias) {
            add_position_bias(p, it, head, r, rows, jb, a);
            add_position_bias(p, it, head, r, rows, jb + VL, b);
        }
        mask_scores(probs, np, jb, a, lo, hi, rowmax);
        mask_scores(probs, np, jb + VL, b, lo, hi, rowmax);
    }
    if (jb < np) { /* an odd last vector of keys */
        vf a[QROWS];
        for (int rr = 0; rr < QROWS; rr++) a[rr] = vsplat(0.0f);
        for (int d = 0; d < D; d++) {
            vf k0 = vload(kt + (size_t)d * np + jb);
            for (int rr = 0; rr < QROWS; rr++) a[rr] += qr[rr][d] * k0;
        }
        if (p->bias) add_position_bias(p, it, head, r, rows, jb, a);
        mask_scores(probs, np, jb, a, lo, hi, rowmax);
    }
}

/* Weighted sum of values over keys [jlo, jhi) for four rows, scaled by each row's 1 / sum, into
 * dst[rr] (Dp floats each): two head-dim vectors per pass (fma_rows_x2). */
__attribute__((noinline)) static void weigh_rows(float *const *dst, const float *vals, const float *probs, int np,
                                                 int Dp, int jlo, int jhi, const float *inv_sum) {
    const float *p0 = probs, *p1 = probs + np, *p2 = probs + 2 * (size_t)np, *p3 = probs + 3 * (size_t)np;
    int dc = 0;
    for (; dc + 2 * VL <= Dp; dc += 2 * VL) {
        vf a[QROWS], b[QROWS];
        for (int rr = 0; rr < QROWS; rr++) a[rr] = b[rr] = vsplat(0.0f);
        for (int j = jlo; j < jhi; j++) {
            const float *row = vals + (size_t)j * Dp + dc;
            fma_rows_x2(a, b, vload(row), vload(row + VL), p0 + j, p1 + j, p2 + j, p3 + j);
        }
        for (int rr = 0; rr < QROWS; rr++) {
            vstore(dst[rr] + dc, a[rr] * inv_sum[rr]);
            vstore(dst[rr] + dc + VL, b[rr] * inv_sum[rr]);
        }
    }
    if (dc < Dp) { /* an odd last vector of head dims */
        vf a[QROWS];
        for (int rr = 0; rr < QROWS; rr++) a[rr] = vsplat(0.0f);
        for (int j = jlo; j < jhi; j++) {
            vf v0 = vload(vals + (size_t)j * Dp + dc);
            for (int rr = 0; rr < QROWS; rr++) a[rr] += probs[(size_t)rr * np + j] * v0;
        }
        for (int rr = 0; rr < QROWS; rr++) vstore(dst[rr] + dc, a[rr] * inv_sum[rr]);
    }
}

/* float32 storage with whole vectors per head: finished rows go straight to `out` (no padding
 * to spill into the next head), skipping two copies (scratch -> item rows -> out). */
static inline int writes_out_directly(const Problem *p) {
    return p->dtype == DTYPE_F32 && p->head_dim_pad == p->head_dim;
}

/* Attention of one query head over the staged float32 rows; results go to the item's output rows. */
static void attend_head(const Problem *p, Scratch *s, const Item *it, int head) {
    const int D = p->head_dim, Dp = p->head_dim_pad, nq = (it->h1 - it->h0) * D;
    const int n = it->j1 - it->j0, np = round_up(n, VL), kh = head / p->group - it->kh0;
    const float *kt = s->kt + (size_t)kh * D * s->key_cap;
    const float *vals = s->vals + (size_t)kh * s->key_cap * Dp;
    const int hoff = (head - it->h0) * D;
    float *probs = s->probs;
    const int direct = writes_out_directly(p);

    for (int r = it->r0; r < it->r1; r += QROWS) {
        int qrow[QROWS], lo[QROWS], hi[QROWS];
        int rows = row_group(p, it, r, qrow, lo, hi);
        const float *qr[QROWS];
        for (int rr = 0; rr < QROWS; rr++) qr[rr] = s->qs + (size_t)qrow[rr] * nq + hoff;

        vf rowmax[QROWS];
        for (int rr = 0; rr < QROWS; rr++) rowmax[rr] = vsplat(-INFINITY);
        score_rows(p, it, kt, qr, head, r, rows, np, probs, lo, hi, rowmax);
        float inv_sum[QROWS];
        softmax_rows(probs, np, rowmax, inv_sum, 0);

        int jlo, jhi;
        group_key_span(lo, hi, &jlo, &jhi);
        float *dst[QROWS];
        for (int rr = 0; rr < QROWS; rr++) /* a short group's spare rows repeat its last row */
            dst[rr] = direct ? (float *)p->out + (it->start + r + (rr < rows ? rr : rows - 1)) * p->o_stride +
                                   (int64_t)head * D
                             : s->acc + (size_t)rr * Dp;
        weigh_rows(dst, vals, probs, np, Dp, jlo, jhi, inv_sum);
        if (!direct) keep_head_rows(p, s, it, r, rows, head);
    }
}

static void run_item(const Problem *p, Scratch *s, const Item *it) {
#ifdef SGL_HAVE_BF16DP
    if (p->dtype == DTYPE_BF16 && p->head_dim % 2 == 0) {
        bf16dp_attend_item(p, s, it);
    } else
#endif
    {
        stage(p, s, it);
        for (int h = it->h0; h < it->h1; h++) attend_head(p, s, it, h);
    }
    if (writes_out_directly(p)) return;
    const int nq = (it->h1 - it->h0) * p->head_dim;
    for (int i = it->r0; i < it->r1; i++)
        store_from_f32(p->out, p->dtype, (it->start + i) * p->o_stride + (int64_t)it->h0 * p->head_dim, nq,
                       s->os + (size_t)(i - it->r0) * nq);
}

/* Length of sequence b, or 0 when it is longer than max_seq_len (> 0) and so not ours. */
static inline int seq_len(const int32_t *cu_seqlens, int b, int max_seq_len) {
    int len = cu_seqlens[b + 1] - cu_seqlens[b];
    return (max_seq_len > 0 && len > max_seq_len) || len < 0 ? 0 : len;
}

/* Rows of one item when the batch has enough sequences to share out whole: splitting a sequence
 * then only repeats the staging of its keys (every block of a bidirectional sequence needs all
 * of them). The cap bounds the per-thread query and output scratch. */
#define WHOLE_SEQUENCE_ROWS 512

/* Entry point. Returns 0, or -1 when scratch memory could not be allocated (the output is then
 * incomplete). block_rows caps the query rows of one work item when there are fewer sequences
 * than 4 items per thread, so that one long sequence still spreads over every thread;
 * scratch_budget caps the bytes of keys and values one item stages, which decides how many heads
 * an item takes. Sequences longer than max_seq_len (when > 0) are left alone, rows untouched: the
 * caller runs those elsewhere (beyond a few hundred tokens a GEMM-based kernel is faster). */
int sgl_varlen_attention(const void *q, const void *k, const void *v, void *out, int dtype,
                         const int32_t *cu_seqlens, int num_seqs, int num_heads, int num_kv_heads,
                         int head_dim, int64_t q_stride, int64_t k_stride, int64_t v_stride,
                         int64_t o_stride, float scale, int causal, int window, int block_rows,
                         int64_t scratch_budget, int max_seq_len, int num_threads, const float *bias,
                         int64_t bias_stride, int64_t bias_center, const int32_t *key_lens) {
    Problem p = {q, k, v, out, dtype, head_dim, round_up(head_dim, VL), num_heads / num_kv_heads,
                 q_stride, k_stride, v_stride, o_stride, scale, causal, window, bias, bias_stride,
                 bias_center, key_lens};
    if (num_threads < 1) num_threads = 1;
    int64_t want = 4 * (int64_t)num_threads; /* items that keep every thread busy to the end */
    int ours = 0; /* sequences this call attends */
    for (int b = 0; b < num_seqs; b++) ours += seq_len(cu_seqlens, b, max_seq_len) > 0;
    if (ours >= want && block_rows < WHOLE_SEQUENCE_ROWS) block_rows = WHOLE_SEQUENCE_ROWS;
    if (block_rows < QROWS) block_rows = QROWS;

    int64_t units = 0; /* (sequence, row block) pairs */
    int max_len = 0;
    for (int b = 0; b < num_seqs; b++) {
        int len = seq_len(cu_seqlens, b, max_seq_len);
        if (len > max_len) max_len = len;
        units += (len + block_rows - 1) / block_rows;
    }
    if (units == 0) return 0;

    /* Heads per item, in whole kv-head groups: as many as the scratch budget allows, but split
     * further when there are too few (sequence, block) pairs to keep every thread busy. */
    int64_t per_kv_head = (int64_t)round_up(max_len, VL) * (head_dim + p.head_dim_pad) * (int64_t)sizeof(float);
    int kv_per_item = (int)(scratch_budget / (per_kv_head > 0 ? per_kv_head : 1));
    if (kv_per_item < 1) kv_per_item = 1;
    if (kv_per_item > num_kv_heads) kv_per_item = num_kv_heads;
    while (kv_per_item > 1 && units * ((num_kv_heads + kv_per_item - 1) / kv_per_item) < want) kv_per_item--;
    int heads_per_item = kv_per_item * p.group;
    if (units * ((num_heads + heads_per_item - 1) / heads_per_item) < want) {
        /* One kv head per item is still too coarse: split its query heads too. A chunk then spans
         * at most two kv heads. */
        int64_t fit = (int64_t)num_heads * units / want;
        heads_per_item = fit < 1 ? 1 : (fit < heads_per_item ? (int)fit : heads_per_item);
    }
    int head_chunks = (num_heads + heads_per_item - 1) / heads_per_item;
    int kv_cap = (heads_per_item + p.group - 1) / p.group + 1; /* an unaligned chunk can straddle two */
    if (kv_cap > num_kv_heads) kv_cap = num_kv_heads;

    int64_t num_items = units * head_chunks;
    int32_t *items = malloc((size_t)num_items * 3 * sizeof(int32_t));
    if (!items) return -1;
    int64_t at = 0;
    for (int b = 0; b < num_seqs; b++) {
        int len = seq_len(cu_seqlens, b, max_seq_len);
        int blocks = (len + block_rows - 1) / block_rows;
        for (int blk = 0; blk < blocks; blk++)
            for (int hc = 0; hc < head_chunks; hc++) {
                items[at * 3 + 0] = b;
                items[at * 3 + 1] = blk;
                items[at * 3 + 2] = hc * heads_per_item;
                at++;
            }
    }

    int failed = 0;
#pragma omp parallel num_threads(num_threads) reduction(| : failed)
    {
        Scratch s;
        /* Every thread must reach the worksharing loop, even one whose scratch allocation failed
         * (it then skips its items, and the call reports the failure). */
        int ready = scratch_init(&s, max_len, block_rows, heads_per_item, kv_cap, head_dim, p.head_dim_pad) == 0;
        failed |= !ready;
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < num_items; i++) {
            if (!ready) continue;
            Item it;
            int b = items[i * 3 + 0], blk = items[i * 3 + 1], unused;
            it.start = cu_seqlens[b];
            it.len = (int)(cu_seqlens[b + 1] - it.start);
            int blocks = (it.len + block_rows - 1) / block_rows;
            int per = (it.len + blocks - 1) / blocks; /* equal split of the sequence's rows */
            it.r0 = blk * per;
            it.r1 = it.r0 + per < it.len ? it.r0 + per : it.len;
            if (it.r0 >= it.r1) continue;
            it.keys = it.len;
            if (p.key_lens && p.key_lens[b] < it.len) it.keys = p.key_lens[b] > 0 ? p.key_lens[b] : 1;
            key_range(&p, it.r0, it.keys, &it.j0, &unused);
            key_range(&p, it.r1 - 1, it.keys, &unused, &it.j1);
            it.h0 = items[i * 3 + 2];
            it.h1 = it.h0 + heads_per_item < num_heads ? it.h0 + heads_per_item : num_heads;
            it.kh0 = it.h0 / p.group;
            it.kh1 = (it.h1 - 1) / p.group + 1;
            run_item(&p, &s, &it);
        }
        if (ready) free(s.kt);
    }
    free(items);
    return failed ? -1 : 0;
}
