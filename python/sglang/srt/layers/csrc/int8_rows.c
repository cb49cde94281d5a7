/* The per-row (per-token) steps around oneDNN's int8 matmul, one pass each (layers/int8_linear.py
 * holds the same arithmetic in torch ops, and the derivation):
 *
 *   sgl_int8_quantize_rows: x (float32, optionally times a per-column smoothing factor) ->
 *       t = floor((x - min) * levels / span + 0.5) + low per row, with the row's span and min;
 *   sgl_int8_dequant_rows: out = out * span + (min - low * span / levels) * row_sums + bias
 *       (+ a residual row when given, then LayerNorm when given), then GELU when asked (the layer's
 *       activation, in the same pass: a separate torch GELU was a fifth of the int8 forward), then,
 *       when asked, the NEXT int8 layer's quantization of the finished row (its smoothing, levels
 *       and low): the row is quantized while it is in L1 instead of being re-read by a separate
 *       quantize call, and where the float row has no other reader it is not written back at all.
 *
 * Each call is one pass over its rows (a row is re-read from L1/L2, never from memory), rows
 * spread over threads through the OpenMP runtime torch already uses. No GEMM here: the matmul is
 * oneDNN's. Built and cached per machine by cpu_kernel_loader.build_kernel.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "vec16.h"

#define PARALLEL_MIN_ELEMS 32768

typedef uint8_t vu8 __attribute__((vector_size(VL)));
typedef uint8_t vu8_unaligned __attribute__((vector_size(VL), aligned(1), may_alias));

/* a < b ? a : b and a > b ? a : b per lane, and integers clamped to [lo, hi]: one instruction each
 * with AVX2 / AVX-512 (GCC compiles the portable select form to a compare and a blend). Elsewhere
 * (SSE, NEON) the rows run GCC's own vectorization of the plain loops (ROW_VECTORS 0): the generic
 * vector forms were several times slower there (16-lane vectors split into 4 registers). */
#if defined(__AVX512F__) && VL == 16
#define ROW_VECTORS 1
#include <immintrin.h>
static inline vf vmin_(vf a, vf b) { return (vf)_mm512_min_ps((__m512)a, (__m512)b); }
static inline vf vmax_(vf a, vf b) { return (vf)_mm512_max_ps((__m512)a, (__m512)b); }
static inline vi vclamp(vi t, vi lo, vi hi) {
    return (vi)_mm512_min_epi32(_mm512_max_epi32((__m512i)t, (__m512i)lo), (__m512i)hi);
}
#elif defined(__AVX2__) && VL == 8
#define ROW_VECTORS 1
#include <immintrin.h>
static inline vf vmin_(vf a, vf b) { return (vf)_mm256_min_ps((__m256)a, (__m256)b); }
static inline vf vmax_(vf a, vf b) { return (vf)_mm256_max_ps((__m256)a, (__m256)b); }
static inline vi vclamp(vi t, vi lo, vi hi) {
    return (vi)_mm256_min_epi32(_mm256_max_epi32((__m256i)t, (__m256i)lo), (__m256i)hi);
}
#define SGL_STORE_BYTES_AVX2 1 /* GCC narrows 8 ints to bytes one lane at a time there */
static inline void store_bytes(uint8_t *out, vi t) {
    __m256i v = _mm256_and_si256((__m256i)t, _mm256_set1_epi32(0xFF)); /* the low byte: packs never saturate */
    __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64((__m128i *)out, _mm_packus_epi16(w, w));
}
#else
#define ROW_VECTORS 0
static inline vf vmin_(vf a, vf b) { return vselect(a < b, a, b); }
static inline vf vmax_(vf a, vf b) { return vselect(a > b, a, b); }
static inline vi vclamp(vi t, vi lo, vi hi) {
    vi below = t < lo, above = t > hi;
    return (t & ~(below | above)) | (lo & below) | (hi & above);
}
#endif

#ifndef SGL_STORE_BYTES_AVX2
/* the low byte of each lane (vpmovdb with AVX-512) */
static inline void store_bytes(uint8_t *out, vi t) { *(vu8_unaligned *)out = __builtin_convertvector(t, vu8); }
#endif

/* One row: the min and span of x * smooth, then the stored integers (the bits of int8 when low is
 * -128, of uint8 when low is 0). The same code for both callers, so a row quantized in the
 * dequantize pass gets the same integers as through sgl_int8_quantize_rows. With ROW_VECTORS in
 * whole vectors: GCC's own vectorization of these loops ran at ~1 cycle per element on AVX-512 (one
 * max accumulator: a 4-cycle dependency per vector; compare-and-blend for min, max and the clamp;
 * int-to-byte narrowing through permutes), 1.2-1.5x the time of this form (benchmark/NOTES.md). */
static inline void quantize_row(const float *restrict row, const float *restrict smooth, int64_t k, int levels,
                                int low, uint8_t *restrict out, float *restrict span, float *restrict lo) {
    float mn = INFINITY, mx = -INFINITY;
    int64_t j = 0;
    if (ROW_VECTORS && k >= 4 * VL) { /* four independent accumulators each */
        vf mn0 = vsplat(INFINITY), mn1 = mn0, mn2 = mn0, mn3 = mn0;
        vf mx0 = vsplat(-INFINITY), mx1 = mx0, mx2 = mx0, mx3 = mx0;
        for (; j + 4 * VL <= k; j += 4 * VL) {
            vf v0 = vload(row + j) * vload(smooth + j), v1 = vload(row + j + VL) * vload(smooth + j + VL);
            vf v2 = vload(row + j + 2 * VL) * vload(smooth + j + 2 * VL);
            vf v3 = vload(row + j + 3 * VL) * vload(smooth + j + 3 * VL);
            mn0 = vmin_(v0, mn0), mn1 = vmin_(v1, mn1), mn2 = vmin_(v2, mn2), mn3 = vmin_(v3, mn3);
            mx0 = vmax_(v0, mx0), mx1 = vmax_(v1, mx1), mx2 = vmax_(v2, mx2), mx3 = vmax_(v3, mx3);
        }
        mn0 = vmin_(vmin_(mn0, mn1), vmin_(mn2, mn3));
        mx0 = vmax_(vmax_(mx0, mx1), vmax_(mx2, mx3));
        for (int l = 0; l < VL; l++) {
            mn = mn0[l] < mn ? mn0[l] : mn;
            mx = mx0[l] > mx ? mx0[l] : mx;
        }
    }
#pragma omp simd reduction(min : mn) reduction(max : mx)
    for (int64_t c = j; c < k; c++) {
        float v = row[c] * smooth[c];
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
    }
    float s = mx - mn;
    if (!(s >= 1e-12f))
        s = 1e-12f;
    float a = (float)levels / s;
    float shift = 0.5f - mn * a;
    int top = low + levels;
    /* (x - min) * a + 0.5 >= 0 up to rounding, so truncation is floor, i.e. rounding; the bytes are
     * two's complement bits either way */
    vf va = vsplat(a), vshift = vsplat(shift);
    vi vlow = (vi){0} + low, vtop = (vi){0} + top;
    for (j = 0; ROW_VECTORS && j + VL <= k; j += VL) {
        vi t = __builtin_convertvector(vload(row + j) * vload(smooth + j) * va + vshift, vi) + vlow;
        store_bytes(out + j, vclamp(t, vlow, vtop));
    }
#pragma omp simd
    for (int64_t c = j; c < k; c++) {
        int t = (int)(row[c] * smooth[c] * a + shift) + low;
        t = t < low ? low : t;
        out[c] = (uint8_t)((t > top ? top : t) & 0xFF);
    }
    *span = s;
    *lo = mn;
}

/* smooth: k factors (ones where the layer has no smoothing). */
void sgl_int8_quantize_rows(const float *restrict x, int64_t ldx, const float *restrict smooth, int64_t m, int64_t k,
                            int levels, int low, int8_t *restrict q, float *restrict span, float *restrict lo, int threads)
{
#pragma omp parallel for schedule(static) num_threads(threads) if (m * k >= PARALLEL_MIN_ELEMS)
    for (int64_t i = 0; i < m; i++)
        quantize_row(x + i * ldx, smooth, k, levels, low, (uint8_t *)q + i * k, span + i, lo + i);
}

/* GELU over one row in place, whole vectors and then the tail through a zero-padded vector. */
static inline void gelu_row(float *restrict row, int64_t n) {
    int64_t j = 0;
    for (; j + VL <= n; j += VL)
        vstore(row + j, vgelu(vload(row + j)));
    if (j < n) {
        float tail[VL] = {0};
        for (int64_t t = j; t < n; t++) tail[t - j] = row[t];
        vstore(tail, vgelu(vload(tail)));
        for (int64_t t = j; t < n; t++) row[t] = tail[t - j];
    }
}

/* LayerNorm of one row in place: (x - mean) / sqrt(var + eps) * w (+ b), biased variance. */
static inline void layer_norm_row(float *restrict row, int64_t n, const float *restrict w, const float *restrict b,
                                  float eps) {
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; j++)
        sum += row[j];
    float mean = sum / (float)n, sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t j = 0; j < n; j++)
        sq += (row[j] - mean) * (row[j] - mean);
    float inv = 1.0f / sqrtf(sq / (float)n + eps);
    for (int64_t j = 0; j < n; j++)
        row[j] = (row[j] - mean) * inv * w[j] + (b ? b[j] : 0.0f);
}

/* The dequantize pass over one row: src (the matmul's output row) -> dst (src itself, or a scratch
 * row when the float result is not kept), then the optional residual, LayerNorm and GELU on dst. */
static inline void dequant_row(const float *src, float *dst, int64_t n, float s, float off,
                               const float *restrict row_sums, const float *restrict bias, const float *restrict res,
                               const float *restrict norm_w, const float *restrict norm_b, float eps, int gelu) {
    if (dst == src) { /* in place: one pointer, so the loops vectorize without an overlap check */
        if (bias) {
            for (int64_t j = 0; j < n; j++)
                dst[j] = dst[j] * s + off * row_sums[j] + bias[j];
        } else {
            for (int64_t j = 0; j < n; j++)
                dst[j] = dst[j] * s + off * row_sums[j];
        }
    } else if (bias) {
        for (int64_t j = 0; j < n; j++)
            dst[j] = src[j] * s + off * row_sums[j] + bias[j];
    } else {
        for (int64_t j = 0; j < n; j++)
            dst[j] = src[j] * s + off * row_sums[j];
    }
    if (res) {
        for (int64_t j = 0; j < n; j++)
            dst[j] += res[j];
    }
    if (norm_w) /* LayerNorm over the row (two passes over it in L1, as the torch op does) */
        layer_norm_row(dst, n, norm_w, norm_b, eps);
    if (gelu)
        gelu_row(dst, n); /* the row is still in L1/L2 */
}

/* residual (NULL: none): rows of ldr floats added after the bias (BERT's dense -> + residual ->
 * LayerNorm), in the same pass instead of a separate torch add over the output; norm_w (NULL: none),
 * norm_b (NULL: none) and eps: that LayerNorm too, over each whole row (n = the hidden size).
 * q (NULL: none): the finished rows quantized for the next int8 layer (n smoothing factors q_smooth,
 * q_levels, q_low) into q [m, n] with q_span / q_lo [m]; keep_float 0 leaves `out` unwritten (its
 * contents are then undefined: only q is the result). Returns 0, or -1 if a scratch row could not
 * be allocated (nothing is then guaranteed about q). */
int sgl_int8_dequant_rows(float *restrict out, int64_t ldo, int64_t m, int64_t n, const float *restrict span,
                          const float *restrict lo, const float *restrict row_sums, const float *restrict bias,
                          const float *restrict residual, int64_t ldr, const float *restrict norm_w,
                          const float *restrict norm_b, float eps, int levels, int low, int gelu,
                          const float *restrict q_smooth, int q_levels, int q_low, int8_t *restrict q,
                          float *restrict q_span, float *restrict q_lo, int keep_float, int threads)
{
    int failed = 0;
    int scratch_needed = q && !keep_float;
#pragma omp parallel num_threads(threads) if (m * n >= PARALLEL_MIN_ELEMS) reduction(| : failed)
    {
        float *scratch = scratch_needed ? malloc((size_t)n * sizeof(float)) : NULL;
        if (scratch_needed && !scratch)
            failed = 1;
#pragma omp for schedule(static)
        for (int64_t i = 0; i < m; i++) {
            if (scratch_needed && !scratch)
                continue;
            float *row = out + i * ldo;
            float *dst = scratch_needed ? scratch : row;
            float s = span[i];
            float off = lo[i] - (float)low * s / (float)levels;
            dequant_row(row, dst, n, s, off, row_sums, bias, residual ? residual + i * ldr : NULL, norm_w, norm_b,
                        eps, gelu);
            if (q)
                quantize_row(dst, q_smooth, n, q_levels, q_low, (uint8_t *)q + i * n, q_span + i, q_lo + i);
        }
        free(scratch);
    }
    return failed ? -1 : 0;
}
