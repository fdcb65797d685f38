// Synthetic DeepSeek-V4-shaped workloads, the op's arguments (OpArgs) over a conformance case,
// and the case's buffers on a device.
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
  RecipeId recipe = RecipeId::kV4Fp8;  // decides the freqs layout (and the case's recipe)
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
//   freqs: cos(p * theta_j) and sin(p * theta_j), theta_j = 10000^(-2j/64), j = 0..31, laid out
//          as the recipe says (interleaved: [2j] = cos, [2j+1] = sin; halves: [j], [32+j]);
//   positions   = a prefill: start, start + 1, ..., start + tokens - 1, start seed-chosen.
// Values are rounded to the input dtype with round-to-nearest-even.
Workload make_workload(const WorkloadSpec& spec);

// Float32 -> bf16 / fp16 bits, round to nearest even (NaN stays NaN, overflow -> Inf).
std::uint16_t f32_to_bf16(float f);
std::uint16_t f32_to_f16(float f);

// Where the op's tensors of a case live (host or device pointers).
struct CasePointers {
  const void* q_input = nullptr;
  const void* weight = nullptr;
  const void* freqs = nullptr;
  const void* positions = nullptr;
  void* q_out = nullptr;        // codes: out_bytes_per_row() bytes per row
  void* q_sf = nullptr;         // FP4 recipes: 4 bytes per row (int32); else unused
  float* weights_out = nullptr;
};
// The op's arguments for case c (its recipe, sizes, dtypes, weight_scale) over pointers p on
// device dev: q_out typed as the recipe's format says (fp8_e4m3fn, fp8_e4m3fnuz, or uint8 code
// pairs), q_scale (B, H) int32 for FP4 recipes and empty otherwise.
OpArgs make_op_args(const io::ConformanceCase& c, const CasePointers& p, Device dev = Device{});

// The outputs of one call, on the host.
struct Outputs {
  std::vector<std::uint8_t> q_out;  // B*H*out_bytes_per_row()
  std::vector<std::uint8_t> q_sf;   // B*H*4 for FP4 recipes, else empty
  std::vector<float> weights_out;   // B*H
};

// The op's tensors of a case in a runtime's memory. Inputs are uploaded from a host case at
// construction; `shared_freqs` (device memory, max_pos x 64 floats) is used instead of a
// private copy when given. Not copyable. Throws std::runtime_error if allocation fails.
class DeviceCase {
 public:
  DeviceCase(DeviceRuntime& rt, const io::ConformanceCase& c, const float* shared_freqs = nullptr);
  ~DeviceCase();
  DeviceCase(const DeviceCase&) = delete;
  DeviceCase& operator=(const DeviceCase&) = delete;

  std::int64_t rows() const { return shape_.B * shape_.H; }
  // The op's arguments over these buffers (device views).
  OpArgs args() const;
  // run(args(), options) with the runtime's stream.
  Status run(const Options& options) const;
  // Fills every output (codes, block scales, weights_out) with `byte` (poisoning them before a run).
  void poison(unsigned char byte);
  // Copies the outputs to the host (synchronizes first).
  void download(Outputs* out) const;
  const float* freqs() const { return static_cast<const float*>(p_.freqs); }

 private:
  void* alloc_copy(const std::vector<std::uint8_t>& host);
  DeviceRuntime& rt_;
  io::ConformanceCase shape_;  // recipe, sizes, dtypes, weight_scale (no data)
  CasePointers p_;
  std::vector<void*> owned_;
};

// Runs the scalar reference on host copies of the case's inputs.
Status reference_outputs(const io::ConformanceCase& c, Outputs* out);
// Runs the scalar reference and stores its outputs as the case's expected outputs
// (q_out, q_sf, weights_out), so io::compare_outputs(*c, ...) compares against it.
Status fill_expected(io::ConformanceCase* c);

}  // namespace cli
}  // namespace indexer_q
