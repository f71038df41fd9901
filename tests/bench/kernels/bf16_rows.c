// One linear's product y = W x, hand-written for tests/bench/hand_kernels.py (a diagnostic: IREE's own code for the
// same bytes against a C loop linked into the dispatch; docs/performance.md "Hand-written kernels in IREE's dispatches").
// Freestanding (IREE links it into its embedded ELF: no libc, no globals). AVX-512.
#include <stddef.h>
#include <stdint.h>
#include <immintrin.h>
// Each memref argument arrives as MLIR lowers it: (allocated, aligned, offset, size, stride).
// y[r] = sum_k x[k] * bf16(W[r][k]) for rows [r0, r0 + R), W row-major [N, K]; any K, N a multiple of 32
// (hand_kernels.py's precondition: every workgroup has 32 rows, taken 4 at a time).
#define R 32
static inline __m512 widen(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}
void bf16_rows_workgroup(const float* restrict xb, const float* restrict x, size_t xo, size_t xs, size_t xst,
                         const uint16_t* restrict wb, const uint16_t* restrict w, size_t wo, size_t ws, size_t wst,
                         float* restrict yb, float* restrict y, size_t yo, size_t ys, size_t yst,
                         size_t n, size_t k, size_t wg) {
  x += xo; w += wo; y += yo;
  size_t r0 = wg * R, r1 = r0 + R < n ? r0 + R : n;
  size_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    const uint16_t* a = w + r * k;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, t0 = s0, t1 = s0, t2 = s0, t3 = s0;
    size_t i = 0;
    for (; i + 32 <= k; i += 32) {
      __m512 xa = _mm512_loadu_ps(x + i), xc = _mm512_loadu_ps(x + i + 16);
      s0 = _mm512_fmadd_ps(xa, widen(a + i), s0);          t0 = _mm512_fmadd_ps(xc, widen(a + i + 16), t0);
      s1 = _mm512_fmadd_ps(xa, widen(a + k + i), s1);      t1 = _mm512_fmadd_ps(xc, widen(a + k + i + 16), t1);
      s2 = _mm512_fmadd_ps(xa, widen(a + 2 * k + i), s2);  t2 = _mm512_fmadd_ps(xc, widen(a + 2 * k + i + 16), t2);
      s3 = _mm512_fmadd_ps(xa, widen(a + 3 * k + i), s3);  t3 = _mm512_fmadd_ps(xc, widen(a + 3 * k + i + 16), t3);
    }
    float v0 = _mm512_reduce_add_ps(_mm512_add_ps(s0, t0)), v1 = _mm512_reduce_add_ps(_mm512_add_ps(s1, t1));
    float v2 = _mm512_reduce_add_ps(_mm512_add_ps(s2, t2)), v3 = _mm512_reduce_add_ps(_mm512_add_ps(s3, t3));
    for (; i < k; ++i) {
      float xi = x[i];
      union { uint32_t u; float f; } c0 = {(uint32_t)a[i] << 16}, c1 = {(uint32_t)a[k + i] << 16},
                                     c2 = {(uint32_t)a[2 * k + i] << 16}, c3 = {(uint32_t)a[3 * k + i] << 16};
      v0 += xi * c0.f; v1 += xi * c1.f; v2 += xi * c2.f; v3 += xi * c3.f;
    }
    y[r] = v0; y[r + 1] = v1; y[r + 2] = v2; y[r + 3] = v3;
  }
}
