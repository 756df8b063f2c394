// One fused pass of AdamW with OPSFT's per-weight constraint (see opsft/fused_adamw.py).
//
// Per element, with code c in {-1, 0, +1} (sign of v) or "free" (a location mask's kept weights):
//   g     <- g if the descent -g lies in the allowed interval of c, else 0  (only when mask_grad)
//   m     <- beta1 m + (1 - beta1) g
//   s     <- beta2 s + (1 - beta2) g^2
//   theta <- theta (1 - lr wd) - (lr sqrt(bc2) / bc1) m / (sqrt(s) + eps sqrt(bc2))   (bc_k = 1 - beta_k^t)
//   theta <- theta_old if the step went against c (c = +1: theta < theta_old; c = -1: theta > theta_old;
//            c = 0: always)
// theta_old is the value read at the start of the element's update, so no copy of the weights is kept.
//
// Codes are 2 bits a weight (0: v = 0, 1: v = +1, 2: free, 3: v = -1), packed in blocks of 256 weights to
// one 64-byte cache line: byte k of a block holds the codes of the block's weights k, k + 64, k + 128 and
// k + 192 in bits 0-1, 2-3, 4-5 and 6-7. Unpacking a block is four plain byte loops into a buffer in L1, so
// the update loop below vectorizes as it would over int8 codes, while the constrained step moves 28.25 bytes
// per fp32 weight against plain AdamW's 28.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace {

constexpr int64_t kBlock = 256;             // weights per block of codes
constexpr int64_t kBlockBytes = kBlock / 4;  // one cache line
constexpr int kUp = 1, kFree = 2, kDown = 3;

void check(const at::Tensor& t, at::ScalarType dtype, const char* what, int64_t index, int64_t numel) {
  TORCH_CHECK(t.device().is_cpu(), what, " ", index, " is not a CPU tensor");
  TORCH_CHECK(t.scalar_type() == dtype, what, " ", index, " has dtype ", t.scalar_type(), ", expected ", dtype);
  TORCH_CHECK(t.is_contiguous(), what, " ", index, " is not contiguous");
  TORCH_CHECK(numel < 0 || t.numel() == numel, what, " ", index, " has ", t.numel(), " elements, expected ", numel);
}

template <bool kMaskGrad>
void update(float* __restrict param, const float* __restrict grad, float* __restrict exp_avg,
            float* __restrict exp_avg_sq, const uint8_t* __restrict packed, int64_t n, float beta1, float beta2,
            float grad_coef1, float grad_coef2, float decay, float step_size, float eps_bc2) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  // captures by value: under OpenMP the body is outlined, and float scalars captured by reference could alias
  // the float arrays it writes, which keeps the loop from vectorizing
  at::parallel_for(0, blocks, 64, [=](int64_t first, int64_t last) {
    alignas(64) uint8_t code[kBlock];
    for (int64_t b = first; b < last; ++b) {
      const uint8_t* line = packed + b * kBlockBytes;
      for (int64_t k = 0; k < kBlockBytes; ++k) code[k] = line[k] & 3;
      for (int64_t k = 0; k < kBlockBytes; ++k) code[k + kBlockBytes] = (line[k] >> 2) & 3;
      for (int64_t k = 0; k < kBlockBytes; ++k) code[k + 2 * kBlockBytes] = (line[k] >> 4) & 3;
      for (int64_t k = 0; k < kBlockBytes; ++k) code[k + 3 * kBlockBytes] = line[k] >> 6;
      const int64_t start = b * kBlock, len = std::min(kBlock, n - start);
      float* __restrict p = param + start;
      const float* __restrict gr = grad + start;
      float* __restrict ea = exp_avg + start;
      float* __restrict es = exp_avg_sq + start;
      for (int64_t i = 0; i < len; ++i) {
        // branch-free selects (the loop vectorizes; a random sign pattern would defeat branch prediction)
        const int c = code[i];
        const bool free = c == kFree, up = c == kUp, down = c == kDown;
        const float old = p[i];
        float g = gr[i];
        if (kMaskGrad) {
          g = (free | (up & !(g > 0.f)) | (down & !(g < 0.f))) ? g : 0.f;
        }
        const float m = ea[i] * beta1 + g * grad_coef1;
        const float s = es[i] * beta2 + g * g * grad_coef2;
        ea[i] = m;
        es[i] = s;
        const float stepped = old * decay - step_size * m / (std::sqrt(s) + eps_bc2);
        p[i] = (free | (up & !(stepped < old)) | (down & !(stepped > old))) ? stepped : old;
      }
    }
  });
}

}  // namespace

// One constrained AdamW step over a list of fp32 parameters; each ``step`` (a float32 0-d tensor, as torch's
// AdamW keeps it) is incremented first and gives the bias corrections. ``codes[j]`` holds params[j]'s packed
// 2-bit codes (uint8, 64 bytes per started block of 256 weights).
void sign_adamw_step(std::vector<at::Tensor> params, std::vector<at::Tensor> grads, std::vector<at::Tensor> exp_avgs,
                     std::vector<at::Tensor> exp_avg_sqs, std::vector<at::Tensor> codes,
                     std::vector<at::Tensor> steps, double lr, double beta1, double beta2, double eps,
                     double weight_decay, bool mask_grad) {
  const size_t k = params.size();
  TORCH_CHECK(grads.size() == k && exp_avgs.size() == k && exp_avg_sqs.size() == k && codes.size() == k &&
                  steps.size() == k,
              "sign_adamw_step: lists of different lengths");
  for (size_t j = 0; j < k; ++j) {
    const int64_t n = params[j].numel();
    const int64_t idx = static_cast<int64_t>(j);
    check(params[j], at::kFloat, "parameter", idx, -1);
    check(grads[j], at::kFloat, "gradient", idx, n);
    check(exp_avgs[j], at::kFloat, "exp_avg", idx, n);
    check(exp_avg_sqs[j], at::kFloat, "exp_avg_sq", idx, n);
    check(codes[j], at::kByte, "code", idx, (n + kBlock - 1) / kBlock * kBlockBytes);
    check(steps[j], at::kFloat, "step", idx, 1);
    float* step_ptr = steps[j].data_ptr<float>();
    *step_ptr += 1.f;
    const double step = *step_ptr;
    // bias corrections in double (as torch's AdamW), folded into two float scalars: one division per weight
    const double bc1 = 1 - std::pow(beta1, step);
    const double bc2_sqrt = std::sqrt(1 - std::pow(beta2, step));
    auto run = mask_grad ? update<true> : update<false>;
    run(params[j].data_ptr<float>(), grads[j].data_ptr<float>(), exp_avgs[j].data_ptr<float>(),
        exp_avg_sqs[j].data_ptr<float>(), codes[j].data_ptr<uint8_t>(), n, static_cast<float>(beta1),
        static_cast<float>(beta2), static_cast<float>(1 - beta1), static_cast<float>(1 - beta2),
        static_cast<float>(1 - lr * weight_decay), static_cast<float>(lr * bc2_sqrt / bc1),
        static_cast<float>(eps * bc2_sqrt));
  }
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("sign_adamw_step", &sign_adamw_step, "fused AdamW step with OPSFT's per-weight sign constraint");
}
