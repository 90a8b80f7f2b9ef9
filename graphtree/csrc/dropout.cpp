// Dropout's mask, drawn as PyTorch draws it, faster. F.dropout on the CPU fills its noise with
// noise.bernoulli_(1 - p): one element after another, each from two 32-bit outputs of the generator's
// Mersenne Twister (at::mt19937) made into a double in [0, 1) and compared with 1 - p. That serial loop costs
// about 12 ns an element (benchmarks/dropout_mask.py times it on SST minibatches). bernoulli_ here draws the same
// outputs from the same generator state in blocks (the twist and the tempering vectorize) and compares
// integers, then hands the advanced state back: every mask, and every later draw, is the one PyTorch would
// have made. graphtree/nn/functional.py checks that on first use and falls back to PyTorch where it does not.

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/MT19937RNGEngine.h>

#include <mutex>

#include "kernels.h"

namespace {

constexpr int kStateSize = 624, kShift = 397;  // MT19937's n and m, as at::mt19937 has them

inline uint32_t twist(uint32_t u, uint32_t v) {
  return ((((u & 0x80000000u) | (v & 0x7fffffffu)) >> 1)) ^ ((v & 1u) ? 0x9908b0dfu : 0u);
}

// at::mt19937's next_state(): all 624 words anew. The first loop reads words not yet rewritten, the second
// words rewritten kShift - kStateSize places back: both vectorize.
void next_state(uint32_t* s) {
#pragma omp simd
  for (int k = 0; k < kStateSize - kShift; ++k) s[k] = s[k + kShift] ^ twist(s[k], s[k + 1]);
  for (int k = kStateSize - kShift; k < kStateSize - 1; ++k) s[k] = s[k + kShift - kStateSize] ^ twist(s[k], s[k + 1]);
  s[kStateSize - 1] = s[kShift - 1] ^ twist(s[kStateSize - 1], s[0]);
}

// The next `count` outputs of the engine `state` (at::mt19937's operator(), `count` times), into `out`.
// In at::mt19937, `left - 1` outputs remain before the next twist, from state word `next` on.
void draw(at::mt19937_data_pod& state, uint32_t* out, int64_t count) {
  int64_t done = 0;
  while (done < count) {
    if (state.left_ <= 1) {
      next_state(state.state_.data());
      state.left_ = kStateSize + 1;  // the output that triggered the twist is counted below, like the others
      state.next_ = 0;
    }
    const int64_t take = std::min<int64_t>(state.left_ - 1, count - done);
    const uint32_t* words = state.state_.data() + state.next_;
    uint32_t* o = out + done;
#pragma omp simd
    for (int64_t k = 0; k < take; ++k) {
      uint32_t y = words[k];
      y ^= (y >> 11);
      y ^= (y << 7) & 0x9d2c5680u;
      y ^= (y << 15) & 0xefc60000u;
      y ^= (y >> 18);
      o[k] = y;
    }
    state.left_ -= static_cast<int>(take);
    state.next_ += static_cast<uint32_t>(take);
    done += take;
  }
}

}  // namespace

namespace graphtree {

// out.bernoulli_(p, generator) for a contiguous float32 CPU tensor: out[k] = 1 where the k-th double drawn
// (the generator's random64(): high word first, its low 53 bits over 2^53) is below p, else 0; `value`
// instead of 1 (dropout's kept elements are 1 / (1 - p)).
// u < p with u = x / 2^53 exactly is x < p 2^53, and for an integer x that is x < ceil(p 2^53).
void bernoulli_(at::Tensor out, double p, std::optional<at::Generator> generator, double value) {
  check(out, "out");
  TORCH_CHECK(out.is_contiguous(), "bernoulli_: out must be contiguous");
  TORCH_CHECK(p >= 0 && p <= 1, "bernoulli_: p must be in [0, 1], got ", p);
  const int64_t n = out.numel();
  if (n == 0) return;
  const float kept = static_cast<float>(value);
  constexpr double kTwo53 = 9007199254740992.0;
  const uint64_t threshold = static_cast<uint64_t>(std::ceil(p * kTwo53));
  constexpr uint64_t kLow53 = (uint64_t{1} << 53) - 1;
  auto* gen = at::get_generator_or_default<at::CPUGeneratorImpl>(generator, at::detail::getDefaultCPUGenerator());
  std::lock_guard<std::mutex> lock(gen->mutex_);
  at::mt19937 engine = gen->engine();
  at::mt19937_data_pod state = engine.data();
  float* o = out.data_ptr<float>();
  constexpr int64_t kBlock = 4096;  // elements per block: their 8192 outputs stay in the first-level cache
  std::vector<uint32_t> words(2 * std::min(n, kBlock));
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t m = std::min(kBlock, n - begin);
    draw(state, words.data(), 2 * m);
    const uint32_t* w = words.data();
    float* ob = o + begin;
#pragma omp simd
    for (int64_t k = 0; k < m; ++k) {
      const uint64_t x = ((uint64_t{w[2 * k]} << 32) | w[2 * k + 1]) & kLow53;
      ob[k] = x < threshold ? kept : 0.f;
    }
  }
  engine.set_data(state);
  gen->set_engine(engine);
}

}  // namespace graphtree
