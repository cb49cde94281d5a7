/*
 * Portable float vectors (GCC/Clang vector extensions) of VL lanes and the elementwise functions the CPU kernels share: exp for x <= 0 and the exact
 * (erf) GELU. Used by the varlen attention kernels (attention/csrc/varlen_common.h) and the int8
 * row kernel (int8_rows.c).
 */
#ifndef SGL_VEC16_H
#define SGL_VEC16_H

#include <stdint.h>

/* Floats per vector: 16 (one AVX-512 register; 4 x NEON elsewhere), but 8 on x86-64 without
 * AVX-512. There GCC keeps a 64-byte vector it has no register for in memory, spilling every
 * operation: the attention kernel built for AVX2 (x86-64-v3, haswell, znver2) ran 7x slower than
 * its AVX-512 build on the same machine (benchmark/NOTES.md, "The CPU kernels on AVX2"). */
#if (defined(__x86_64__) || defined(__i386__)) && !defined(__AVX512F__)
#define VL 8
#else
#define VL 16
#endif

typedef float vf __attribute__((vector_size(VL * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(VL * sizeof(int32_t))));
typedef float vf_unaligned __attribute__((vector_size(VL * sizeof(float)), aligned(4), may_alias));

static inline vf vload(const float *p) { return *(const vf_unaligned *)p; }
/* A vector loaded once for several FMAs: the empty asm makes the compiler keep it in a register.
 * Otherwise GCC folds the load into every FMA that reads it (a memory operand), and a loop meant
 * to load one vector per four FMAs loads one per FMA and runs at the load ports' rate. */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define VKEEP(v) __asm__("" : "+v"(v))
#elif defined(__GNUC__) && defined(__aarch64__)
#define VKEEP(v) __asm__("" : "+w"(v))
#else
#define VKEEP(v) ((void)0)
#endif
static inline void vstore(float *p, vf v) { *(vf_unaligned *)p = v; }
/* Every lane x. Not `(vf){0} + x`: that is an addition the compiler must keep (0 + -0 is +0),
 * three instructions where one broadcast does. */
#if VL == 16
static inline vf vsplat(float x) { return (vf){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }
#else
static inline vf vsplat(float x) { return (vf){x, x, x, x, x, x, x, x}; }
#endif
static inline vf vselect(vi mask, vf a, vf b) { return (vf)(((vi)a & mask) | ((vi)b & ~mask)); }
static inline vf vmax(vf a, vf b) { return vselect(a > b, a, b); }

/* exp(x) for -87 <= x <= 0, no guard (see vexp): the range reduction by ln 2 and the polynomial.
 * `coarse` (a compile-time constant at every call) picks a degree-4 polynomial, relative error
 * ~4e-5, for probabilities that are rounded to bfloat16 anyway; otherwise Cephes' degree-6 one,
 * ~2 ulp. */
static inline vf vexp_in_range(vf x, int coarse, vi *n_out) {
    const vf magic = vsplat(12582912.0f); /* 1.5 * 2^23: adding it rounds to an integer */
    vf t = x * 1.44269504088896341f + magic;
    vi n = (vi)t - (vi)magic;
    vf fn = t - magic;
    vf r = x - fn * 0.693359375f;
    r = r - fn * -2.12194440e-4f;
    vf y;
    if (coarse) {
        y = vsplat(1.0f / 24.0f);
        y = y * r + 1.0f / 6.0f;
        y = y * r + 0.5f;
        y = y * r + 1.0f;
        y = y * r + 1.0f;
    } else {
        vf p = vsplat(1.9875691500e-4f);
        p = p * r + 1.3981999507e-3f;
        p = p * r + 8.3334519073e-3f;
        p = p * r + 4.1665795894e-2f;
        p = p * r + 1.6666665459e-1f;
        p = p * r + 5.0000001201e-1f;
        y = p * r * r + r + 1.0f;
    }
    *n_out = n;
    return y;
}

/* exp(x) for x <= 0 (scores minus their row maximum, -x^2), after a range reduction by ln 2.
 * Below -87 (masked keys are -inf) the result is exactly 0. */
static inline vf vexp(vf x, int coarse) {
    vi underflow = x < -87.0f;
    vi n;
    vf y = vexp_in_range(vmax(x, vsplat(-87.0f)), coarse, &n);
    /* y * 2^n by adding n to the exponent field: y is in [0.7, 1.5] and n >= -126, so no overflow. */
    return (vf)(((vi)y + (n << 23)) & ~underflow);
}

/* GELU as BERT defines it, x * (1 + erf(x / sqrt 2)) / 2, with erf from Abramowitz & Stegun
 * 7.1.26 (absolute error <= 1.5e-7): erf(a) = 1 - t (a1 + t (a2 + ...)) exp(-a^2), t = 1 / (1 + p a). */
static inline vf vgelu(vf x) {
    const vi sign = (vi){0} + INT32_MIN; /* the float sign bit */
    vf z = x * 0.70710678118654752f;
    vf a = (vf)((vi)z & ~sign); /* |z| */
    vf t = 1.0f / (1.0f + 0.3275911f * a);
    vf p = vsplat(1.061405429f);
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    /* exp(-a^2) without vexp's underflow guard: past a = 9, p t exp(-a^2) < 1e-36 leaves e at 1.0f
     * exactly either way, so a is capped there (-81 is in range) for the same results in fewer
     * instructions (the GELU was ~45 per vector, a quarter of them for signs and the guard). */
    vf am = vselect(a < 9.0f, a, vsplat(9.0f));
    vi n;
    vf y = vexp_in_range(-am * am, 0, &n);
    vf e = 1.0f - p * t * (vf)((vi)y + (n << 23));
    return 0.5f * x * (1.0f + (vf)((vi)e ^ ((vi)z & sign))); /* erf takes z's sign */
}

#endif
