// One linear's product y = W x over GGUF Q8_0 blocks as stored, hand-written for tests/bench/hand_kernels.py (a
// diagnostic; docs/performance.md "Hand-written kernels in IREE's dispatches"). Freestanding, AVX-512 + F16C.
#include <stddef.h>
#include <stdint.h>
#include <immintrin.h>
// Each memref argument arrives as MLIR lowers it: (allocated, aligned, offset, size, stride).
// GGUF Q8_0 rows: each row K/32 blocks of {f16 d; int8 q[32]} (34 bytes). y[r] = sum_b d_b * sum_i q[b][i] * x[32b+i]
// x is f32 (exact); RQ rows per workgroup, taken 2 at a time: N and K are multiples of 32 (hand_kernels.py checks).
#define RQ 32
static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
static inline __m512 q16(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)p)));
}
void q8_rows_workgroup(const float* restrict xb, const float* restrict x, size_t xo, size_t xs, size_t xst,
                       const uint8_t* restrict wb, const uint8_t* restrict w, size_t wo, size_t ws, size_t wst,
                       float* restrict yb, float* restrict y, size_t yo, size_t ys, size_t yst,
                       size_t n, size_t k, size_t wg) {
  x += xo; w += wo; y += yo;
  size_t nb = k / 32, rb = nb * 34;
  size_t r0 = wg * RQ, r1 = r0 + RQ < n ? r0 + RQ : n;
  size_t r = r0;
  for (; r + 2 <= r1; r += 2) {
    const uint8_t* a0 = w + r * rb;
    const uint8_t* a1 = a0 + rb;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, t0 = s0, t1 = s0;
    for (size_t b = 0; b < nb; ++b) {
      const float* xp = x + 32 * b;
      __m512 xa = _mm512_loadu_ps(xp), xc = _mm512_loadu_ps(xp + 16);
      const uint8_t* p0 = a0 + 34 * b;
      const uint8_t* p1 = a1 + 34 * b;
      __m512 d0 = _mm512_set1_ps(h2f(*(const uint16_t*)p0)), d1 = _mm512_set1_ps(h2f(*(const uint16_t*)p1));
      __m512 u0 = _mm512_fmadd_ps(xc, q16((const int8_t*)p0 + 18), _mm512_mul_ps(xa, q16((const int8_t*)p0 + 2)));
      __m512 u1 = _mm512_fmadd_ps(xc, q16((const int8_t*)p1 + 18), _mm512_mul_ps(xa, q16((const int8_t*)p1 + 2)));
      if (b & 1) { s0 = _mm512_fmadd_ps(d0, u0, s0); s1 = _mm512_fmadd_ps(d1, u1, s1); }
      else { t0 = _mm512_fmadd_ps(d0, u0, t0); t1 = _mm512_fmadd_ps(d1, u1, t1); }
    }
    y[r] = _mm512_reduce_add_ps(_mm512_add_ps(s0, t0));
    y[r + 1] = _mm512_reduce_add_ps(_mm512_add_ps(s1, t1));
  }
}
