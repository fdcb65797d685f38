// Synthetic DeepSeek-V4-shaped workloads and the op's buffers on a device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device.h"
#include "indexer_q/indexer_q.h"
#include "io/safetensors.h"

namespace indexer_q {
namespace cli {

struct WorkloadSpec {
  std::int64_t tokens = 4096;
  std::int64_t heads = 64;
  DType dtype = DType::kBFloat16;
  DType pos_dtype = DType::kInt64;
  std::uint64_t seed = 1;
  int outlier_channels = 4;       // channels with `outlier_scale` times the magnitude
  double outlier_scale = 30.0;
  std::int64_t max_pos = 0;       // 0: workload_max_pos(tokens)
  bool make_freqs = true;         // false: leave data.freqs empty (a shared table is used)
};

// The smallest max_pos the generator uses for `tokens`: round_up(tokens, 4096) + 4096, so a
// prefill of `tokens` consecutive positions can start anywhere in the first 4097 positions.
std::int64_t workload_max_pos(std::int64_t tokens);

struct Workload {
  io::ConformanceCase data;       // inputs filled; expected outputs left empty
  std::int64_t start_pos = 0;     // positions are start_pos, start_pos + 1, ...
  std::vector<int> outlier_dims;  // the outlier channels, ascending
};

// Deterministic from spec.seed (a xoshiro256** stream; normals by Box-Muller in double):
//   q[b, h, i]  ~ N(0, 1), times outlier_scale on `outlier_channels` seed-chosen channels
//                 (the same channels for every token and head, as in real projections);
//   weight[b,h] ~ N(0, 1);  weight_scale = 1 / sqrt(heads * 128);
//   freqs[p, 2j] = cos(p * theta_j), freqs[p, 2j+1] = sin(p * theta_j), theta_j = 10000^(-2j/64);
//   positions   = a prefill: start, start + 1, ..., start + tokens - 1, start seed-chosen.
// Values are rounded to the input dtype with round-to-nearest-even.
Workload make_workload(const WorkloadSpec& spec);

// Float32 -> bf16 / fp16 bits, round to nearest even (NaN stays NaN, overflow -> Inf).
std::uint16_t f32_to_bf16(float f);
std::uint16_t f32_to_f16(float f);

// The op's six tensors in a runtime's memory. Inputs are uploaded from a host case at
// construction; `shared_freqs` (device memory, max_pos x 64 floats) is used instead of a
// private copy when given. Not copyable. Throws std::runtime_error if allocation fails.
class DeviceCase {
 public:
  DeviceCase(DeviceRuntime& rt, const io::ConformanceCase& c, const float* shared_freqs = nullptr);
  ~DeviceCase();
  DeviceCase(const DeviceCase&) = delete;
  DeviceCase& operator=(const DeviceCase&) = delete;

  std::int64_t rows() const { return B_ * H_; }
  // The op on these buffers with the given options (the stream is the runtime's).
  Status run(const Options& options) const;
  // Fills both outputs with `byte` (poisoning them before a run).
  void poison(unsigned char byte);
  // Copies both outputs to the host (synchronizes first).
  void download(std::vector<std::uint8_t>* q_fp8, std::vector<float>* weights_out) const;
  OpBuffers buffers() const;
  const float* freqs() const { return freqs_; }

 private:
  void* alloc_copy(const std::vector<std::uint8_t>& host);
  DeviceRuntime& rt_;
  std::int64_t B_, H_, max_pos_;
  DType dtype_, pos_dtype_;
  float weight_scale_;
  void *q_input_ = nullptr, *weight_ = nullptr, *positions_ = nullptr, *q_fp8_ = nullptr;
  float* weights_out_ = nullptr;
  const float* freqs_ = nullptr;
  std::vector<void*> owned_;
};

// Runs the scalar reference on host copies of the case's inputs.
Status reference_outputs(const io::ConformanceCase& c, std::vector<std::uint8_t>* q_fp8,
                         std::vector<float>* weights_out);

}  // namespace cli
}  // namespace indexer_q
