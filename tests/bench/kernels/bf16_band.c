// One linear's product y = W x, hand-written for tests/bench/hand_kernels.py (a diagnostic: IREE's own code for the
// same bytes against a C loop linked into the dispatch; docs/performance.md "Hand-written kernels in IREE's dispatches").
// Freestanding (IREE links it into its embedded ELF: no libc, no globals). AVX-512.
#include <stddef.h>
#include <stdint.h>
#include <immintrin.h>
// Each memref argument arrives as MLIR lowers it: (allocated, aligned, offset, size, stride).
// Row bands: w [B, K, 32] bf16, x [K] f32, y [B, 32] f32; one workgroup per band (`bands` is B).
static inline __m512 lo(__m512i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(v)), 16)); }
static inline __m512 hi(__m512i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1)), 16)); }
void bf16_band_workgroup(const float* restrict xb, const float* restrict x, size_t xo, size_t xs, size_t xst,
                         const uint16_t* restrict wb, const uint16_t* restrict w, size_t wo, size_t ws, size_t wst,
                         float* restrict yb, float* restrict y, size_t yo, size_t ys, size_t yst,
                         size_t bands, size_t k, size_t band) {
  if (band >= bands) return;
  x += xo; w += wo + band * k * 32; y += yo + band * 32;
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, b0 = a0, b1 = a0, c0 = a0, c1 = a0, d0 = a0, d1 = a0;
  size_t i = 0;
  for (; i + 4 <= k; i += 4) {
    __m512i r0 = _mm512_loadu_si512(w + 32 * i), r1 = _mm512_loadu_si512(w + 32 * i + 32);
    __m512i r2 = _mm512_loadu_si512(w + 32 * i + 64), r3 = _mm512_loadu_si512(w + 32 * i + 96);
    __m512 x0 = _mm512_set1_ps(x[i]), x1 = _mm512_set1_ps(x[i + 1]), x2 = _mm512_set1_ps(x[i + 2]), x3 = _mm512_set1_ps(x[i + 3]);
    a0 = _mm512_fmadd_ps(x0, lo(r0), a0); a1 = _mm512_fmadd_ps(x0, hi(r0), a1);
    b0 = _mm512_fmadd_ps(x1, lo(r1), b0); b1 = _mm512_fmadd_ps(x1, hi(r1), b1);
    c0 = _mm512_fmadd_ps(x2, lo(r2), c0); c1 = _mm512_fmadd_ps(x2, hi(r2), c1);
    d0 = _mm512_fmadd_ps(x3, lo(r3), d0); d1 = _mm512_fmadd_ps(x3, hi(r3), d1);
  }
  for (; i < k; ++i) {
    __m512i r0 = _mm512_loadu_si512(w + 32 * i);
    __m512 x0 = _mm512_set1_ps(x[i]);
    a0 = _mm512_fmadd_ps(x0, lo(r0), a0); a1 = _mm512_fmadd_ps(x0, hi(r0), a1);
  }
  _mm512_storeu_ps(y, _mm512_add_ps(_mm512_add_ps(a0, b0), _mm512_add_ps(c0, d0)));
  _mm512_storeu_ps(y + 16, _mm512_add_ps(_mm512_add_ps(a1, b1), _mm512_add_ps(c1, d1)));
}
