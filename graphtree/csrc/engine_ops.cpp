// Row scatter-add for the propagation engine (graphtree/engine.py): a level's gradients flow back into its
// children's rows. On CPU, index_put_(accumulate=True) sorts its indices first, which dominates on large
// levels; this is one pass. Rows may repeat (a DAG node with several parents, the padding row of empty
// slots), so the pass is serial over rows and vectorized within a row.

#include "common.h"

using graphtree::check;

// dst[index[r]] += src[r] for every row r. dst: [m, w], index: [n] int64 in [0, m), src: [n, w]. In place.
void scatter_add_rows_(torch::Tensor dst, torch::Tensor index, torch::Tensor src) {
  check(dst, "dst");
  check(src, "src");
  TORCH_CHECK(dst.is_contiguous(), "dst must be contiguous (it is written in place)");
  TORCH_CHECK(index.device().is_cpu() && index.scalar_type() == torch::kInt64 && index.dim() == 1,
              "index must be a 1-d int64 CPU tensor");
  src = src.contiguous();
  index = index.contiguous();
  const int64_t n = index.numel(), w = dst.size(1), m = dst.size(0);
  TORCH_CHECK(dst.dim() == 2 && src.dim() == 2 && src.size(0) == n && src.size(1) == w,
              "expected dst [m, w], index [n], src [n, w]");
  const int64_t* I = index.data_ptr<int64_t>();
  for (int64_t r = 0; r < n; ++r) TORCH_CHECK(I[r] >= 0 && I[r] < m, "index ", I[r], " out of range for ", m, " rows");
  float* D = dst.data_ptr<float>();
  const float* S = src.data_ptr<float>();
  for (int64_t r = 0; r < n; ++r) {
    float* d = D + I[r] * w;
    const float* s = S + r * w;
#pragma omp simd
    for (int64_t k = 0; k < w; ++k) d[k] += s[k];
  }
}
