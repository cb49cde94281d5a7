/*
 * The bfloat16 path of the varlen attention kernel, for CPUs with avx512_bf16 (Zen 4, Cooper Lake,
 * Sapphire Rapids and later): scores and the weighted sum of values use VDPBF16PS, which multiplies
 * pairs of bf16 values and accumulates in float32, twice the multiply-adds of a float32 FMA per
 * instruction. Keys are staged as [head_dim / 2][keys] pairs of dims and values as
 * [keys / 2][head_dim][2] pairs of keys, so one 512-bit load feeds 16 lanes of either product.
 * Softmax stays float32; probabilities are rounded to bf16 for the weighted sum (as torch's CPU
 * flash kernel does), and the row sums are taken before rounding.
 */
#include "varlen_common.h"

#ifdef SGL_HAVE_BF16DP
#include <immintrin.h>

static inline uint32_t pair_at(const uint16_t *p) { /* two adjacent bf16 values as one word */
    uint32_t w;
    memcpy(&w, p, sizeof w);
    return w;
}

static inline __m512 dot_pairs(__m512 acc, uint32_t pair, __m512i vec) {
    return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_set1_epi32((int)pair), (__m512bh)vec);
}

static void stage_pairs(const Problem *p, Scratch *s, const Item *it) {
    const int D = p->head_dim, Dp = p->head_dim_pad, nkv = it->kh1 - it->kh0;
    const int n = it->j1 - it->j0, np = round_up(n, VL), nq = (it->h1 - it->h0) * D;
    const uint16_t *K = p->k, *V = p->v, *Q = p->q;
    for (int j = 0; j < np; j++) {
        int real = j < n;
        int64_t at = it->start + it->j0 + j;
        for (int kh = 0; kh < nkv; kh++) {
            uint32_t *kt = (uint32_t *)(s->kt + (size_t)kh * D * s->key_cap);
            uint16_t *vp = (uint16_t *)(s->vals + (size_t)kh * s->key_cap * Dp) + (size_t)(j / 2) * Dp * 2 + (j & 1);
            const uint16_t *krow = K + at * p->k_stride + (int64_t)(it->kh0 + kh) * D;
            const uint16_t *vrow = V + at * p->v_stride + (int64_t)(it->kh0 + kh) * D;
            /* Keys past the end are zero: their scores are masked, and zero values keep 0 * v finite. */
            for (int dp = 0; dp < D / 2; dp++) kt[(size_t)dp * np + j] = real ? pair_at(krow + 2 * dp) : 0u;
            for (int d = 0; d < D; d++) vp[2 * d] = real ? vrow[d] : 0;
            for (int d = D; d < Dp; d++) vp[2 * d] = 0;
        }
    }
    uint16_t *qs = (uint16_t *)s->qs;
    for (int i = it->r0; i < it->r1; i++) {
        const uint16_t *src = Q + (it->start + i) * p->q_stride + (int64_t)it->h0 * D;
        uint16_t *dst = qs + (size_t)(i - it->r0) * nq;
        for (int e = 0; e < nq; e++) dst[e] = src[e];
    }
}

static void attend_head_pairs(const Problem *p, Scratch *s, const Item *it, int head) {
    const int D = p->head_dim, Dp = p->head_dim_pad, nq = (it->h1 - it->h0) * D;
    const int n = it->j1 - it->j0, np = round_up(n, VL), kh = head / p->group - it->kh0;
    const uint32_t *kt = (const uint32_t *)(s->kt + (size_t)kh * D * s->key_cap);
    const uint16_t *vp = (const uint16_t *)(s->vals + (size_t)kh * s->key_cap * Dp);
    const uint16_t *qs = (const uint16_t *)s->qs;
    const int hoff = (head - it->h0) * D;
    float *probs = s->probs;
    uint16_t *pbf = s->pbf;

    for (int r = it->r0; r < it->r1; r += QROWS) {
        int qrow[QROWS], lo[QROWS], hi[QROWS];
        int rows = row_group(p, it, r, qrow, lo, hi);
        const uint16_t *qr[QROWS];
        for (int rr = 0; rr < QROWS; rr++) qr[rr] = qs + (size_t)qrow[rr] * nq + hoff;

        vf rowmax[QROWS];
        for (int rr = 0; rr < QROWS; rr++) rowmax[rr] = vsplat(-INFINITY);
        for (int jb = 0; jb < np; jb += VL) {
            __m512 acc[QROWS];
            for (int rr = 0; rr < QROWS; rr++) acc[rr] = _mm512_setzero_ps();
            for (int dp = 0; dp < D / 2; dp++) {
                __m512i kv = _mm512_loadu_si512(kt + (size_t)dp * np + jb);
                for (int rr = 0; rr < QROWS; rr++) acc[rr] = dot_pairs(acc[rr], pair_at(qr[rr] + 2 * dp), kv);
            }
            vf scores[QROWS];
            for (int rr = 0; rr < QROWS; rr++) scores[rr] = (vf)acc[rr] * p->scale;
            if (p->bias) add_position_bias(p, it, head, r, rows, jb, scores);
            mask_scores(probs, np, jb, scores, lo, hi, rowmax);
        }
        float inv_sum[QROWS];
        softmax_rows(probs, np, rowmax, inv_sum, 1);
        for (int rr = 0; rr < QROWS; rr++)
            for (int jb = 0; jb < np; jb += VL)
                _mm256_storeu_si256((__m256i *)(pbf + (size_t)rr * np + jb),
                                    (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(probs + (size_t)rr * np + jb)));

        int jlo, jhi;
        group_key_span(lo, hi, &jlo, &jhi);
        const int jp0 = jlo / 2, jp1 = (jhi + 1) / 2; /* key pairs; probabilities outside are 0 */
        for (int dc = 0; dc < Dp; dc += VL) {
            __m512 acc[QROWS];
            for (int rr = 0; rr < QROWS; rr++) acc[rr] = _mm512_setzero_ps();
            for (int jp = jp0; jp < jp1; jp++) {
                __m512i vv = _mm512_loadu_si512(vp + ((size_t)jp * Dp + dc) * 2);
                for (int rr = 0; rr < QROWS; rr++)
                    acc[rr] = dot_pairs(acc[rr], pair_at(pbf + (size_t)rr * np + 2 * jp), vv);
            }
            for (int rr = 0; rr < QROWS; rr++) vstore(s->acc + (size_t)rr * Dp + dc, (vf)acc[rr] * inv_sum[rr]);
        }
        keep_head_rows(p, s, it, r, rows, head);
    }
}

void bf16dp_attend_item(const Problem *p, Scratch *s, const Item *it) {
    stage_pairs(p, s, it);
    for (int h = it->h0; h < it->h1; h++) attend_head_pairs(p, s, it, h);
}

#endif
