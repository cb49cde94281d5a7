/* The per-row (per-token) steps around oneDNN's int8 matmul, one pass each (layers/int8_linear.py
 * holds the same arithmetic in torch ops, and the derivation):
 *
 *   sgl_int8_quantize_rows: x (float32, optionally times a per-column smoothing factor) ->
 *       t = floor((x - min) * levels / span + 0.5) + low per row, with the row's span and min;
 *   sgl_int8_dequant_rows: out = out * span + (min - low * span / levels) * row_sums + bias
 *       (+ a residual row when given, then LayerNorm when given), then GELU when asked (the layer's activation, in the same pass: a separate torch GELU
 *       was a fifth of the int8 forward).
 *
 * Each call is one pass over its rows (a row is re-read from L1/L2, never from memory), rows
 * spread over threads through the OpenMP runtime torch already uses. No GEMM here: the matmul is
 * oneDNN's. Built and cached per machine by cpu_kernel_loader.build_kernel.
 */
#include <math.h>
#include <stdint.h>

#include "vec16.h"

#define PARALLEL_MIN_ELEMS 32768

/* smooth: k factors (ones where the layer has no smoothing). */
void sgl_int8_quantize_rows(const float *restrict x, int64_t ldx, const float *restrict smooth, int64_t m, int64_t k,
                            int levels, int low, int8_t *restrict q, float *restrict span, float *restrict lo, int threads)
{
#pragma omp parallel for schedule(static) num_threads(threads) if (m * k >= PARALLEL_MIN_ELEMS)
    for (int64_t i = 0; i < m; i++) {
        const float *restrict row = x + i * ldx;
        uint8_t *restrict out = (uint8_t *)q + i * k; /* the bits of int8 (low -128) or uint8 (low 0) */
        float mn = INFINITY, mx = -INFINITY;
#pragma omp simd reduction(min : mn) reduction(max : mx)
        for (int64_t j = 0; j < k; j++) {
            float v = row[j] * smooth[j];
            mn = v < mn ? v : mn;
            mx = v > mx ? v : mx;
        }
        float s = mx - mn;
        if (!(s >= 1e-12f))
            s = 1e-12f;
        float a = (float)levels / s;
        float shift = 0.5f - mn * a;
        int top = low + levels;
#pragma omp simd
        for (int64_t j = 0; j < k; j++) {
            /* (x - min) * a + 0.5 >= 0 up to rounding, so truncation is floor, i.e. rounding */
            int t = (int)(row[j] * smooth[j] * a + shift) + low;
            t = t < low ? low : t;
            out[j] = (uint8_t)((t > top ? top : t) & 0xFF); /* two's complement bits either way */
        }
        span[i] = s;
        lo[i] = mn;
    }
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

/* residual (NULL: none): rows of ldr floats added after the bias (BERT's dense -> + residual ->
 * LayerNorm), in the same pass instead of a separate torch add over the output; norm_w (NULL: none),
 * norm_b (NULL: none) and eps: that LayerNorm too, over each whole row (n = the hidden size). */
void sgl_int8_dequant_rows(float *restrict out, int64_t ldo, int64_t m, int64_t n, const float *restrict span,
                           const float *restrict lo, const float *restrict row_sums, const float *restrict bias,
                           const float *restrict residual, int64_t ldr, const float *restrict norm_w,
                           const float *restrict norm_b, float eps, int levels, int low, int gelu, int threads)
{
#pragma omp parallel for schedule(static) num_threads(threads) if (m * n >= PARALLEL_MIN_ELEMS)
    for (int64_t i = 0; i < m; i++) {
        float *restrict row = out + i * ldo;
        float s = span[i];
        float off = lo[i] - (float)low * s / (float)levels;
        if (bias) {
            for (int64_t j = 0; j < n; j++)
                row[j] = row[j] * s + off * row_sums[j] + bias[j];
        } else {
            for (int64_t j = 0; j < n; j++)
                row[j] = row[j] * s + off * row_sums[j];
        }
        if (residual) {
            const float *restrict res = residual + i * ldr;
            for (int64_t j = 0; j < n; j++)
                row[j] += res[j];
        }
        if (norm_w) /* LayerNorm over the row (two passes over it in L1, as the torch op does) */
            layer_norm_row(row, n, norm_w, norm_b, eps);
        if (gelu)
            gelu_row(row, n); /* the row is still in L1/L2 */
    }
}
