// indexer_q from C++: one call per recipe through run() and OpArgs, a check against the scalar
// reference, and what a bad call returns. Exit status 0 only if everything behaved as expected.
#include <indexer_q/indexer_q.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

using namespace indexer_q;

namespace {

constexpr std::int64_t B = 4, H = 8, D = 128, kMaxPos = 16;

std::uint16_t to_bf16(float f) {  // round to nearest even
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// The caller owns every buffer; the library only reads and writes through TensorViews.
struct Inputs {
  std::vector<std::uint16_t> q, w;  // bf16 bits
  std::vector<float> freqs;         // (max_pos, 64): (cos, sin) per pair, as v4_* recipes expect
  std::vector<std::int64_t> pos;
};

struct Outputs {
  std::vector<std::uint8_t> q;      // fp8 codes (B, H, 128) or fp4 code pairs (B, H, 64)
  std::vector<std::int32_t> q_sf;   // FP4 only: four UE8M0 scale bytes per row
  std::vector<float> w;             // weights_out (B, H, 1)
  explicit Outputs(bool fp4)
      : q(B * H * (fp4 ? D / 2 : D), 0xAB), q_sf(fp4 ? B * H : 0, -1), w(B * H, -1.0f) {}
};

Inputs make_inputs() {
  Inputs in;
  for (std::int64_t i = 0; i < B * H * D; ++i) in.q.push_back(to_bf16(std::sin(0.37f * i) * (i % 7 + 1)));
  for (std::int64_t i = 0; i < B * H; ++i) in.w.push_back(to_bf16(0.5f + 0.01f * i));
  for (std::int64_t p = 0; p < kMaxPos; ++p)
    for (int j = 0; j < 32; ++j) {
      const double theta = p * std::pow(10000.0, -2.0 * j / 64);
      in.freqs.push_back(static_cast<float>(std::cos(theta)));
      in.freqs.push_back(static_cast<float>(std::sin(theta)));
    }
  in.pos = {3, 7, 0, 15};
  return in;
}

OpArgs make_args(RecipeId id, Inputs& in, Outputs& out) {
  const bool fp4 = recipe(id).format == OutFormat::kE2M1;
  OpArgs a;
  a.recipe = id;
  a.q_input = TensorView::contiguous(in.q.data(), DType::kBFloat16, {B, H, D});
  // FP8 codes may be passed as uint8 when the caller has no fp8 type; FP4 packs two codes a byte.
  a.q_out = TensorView::contiguous(out.q.data(), fp4 ? DType::kUInt8 : DType::kFloat8E4M3,
                                   {B, H, fp4 ? D / 2 : D});
  if (fp4) a.q_scale = TensorView::contiguous(out.q_sf.data(), DType::kInt32, {B, H});
  a.weight = TensorView::contiguous(in.w.data(), DType::kBFloat16, {B, H});
  a.weights_out = TensorView::contiguous(out.w.data(), DType::kFloat32, {B, H, 1});
  a.weight_scale = 1.0f / std::sqrt(8192.0f);
  a.freqs = TensorView::contiguous(in.freqs.data(), DType::kFloat32, {kMaxPos, 64});
  a.positions = TensorView::contiguous(in.pos.data(), DType::kInt64, {B});
  return a;
}

bool same(const Outputs& x, const Outputs& y) {
  return x.q == y.q && x.q_sf == y.q_sf &&
         std::memcmp(x.w.data(), y.w.data(), x.w.size() * sizeof(float)) == 0;
}

// Runs `id` on the default backend (kAuto: the tensors' device, here the CPU backend) and on
// the scalar reference; every backend must give the same bytes.
bool run_recipe(RecipeId id, Inputs& in) {
  const bool fp4 = recipe(id).format == OutFormat::kE2M1;
  Outputs fast(fp4), ref(fp4);
  Status s = run(make_args(id, in, fast));
  if (s.ok()) {
    Options opt;
    opt.backend = Backend::kReference;
    s = run(make_args(id, in, ref), opt);
  }
  if (!s.ok()) {
    std::printf("%s: %s\n", recipe_name(id), s.message().c_str());
    return false;
  }

  std::printf("%-7s codes[0][0][0..7]:", recipe_name(id));
  for (int i = 0; i < 8; ++i) std::printf(" %02x", fast.q[i]);
  if (fp4) std::printf("   q_sf[0][0] = 0x%08x", static_cast<unsigned>(fast.q_sf[0]));
  std::printf("\n        weights_out[0][0..3]:");
  for (int i = 0; i < 4; ++i) std::printf(" %.6g", fast.w[i]);
  const bool ok = same(fast, ref);
  std::printf("\n        bit-exact vs reference: %s\n", ok ? "yes" : "NO");
  return ok;
}

// A bad call returns a Status naming the argument, and writes nothing.
bool expect_rejected(const char* what, const OpArgs& a, const Outputs& out, const char* arg) {
  const Outputs before = out;
  const Status s = run(a);
  const bool named = s.message().find(arg) != std::string::npos;
  const bool untouched = same(out, before);
  std::printf("%s\n  -> %s\n  -> outputs untouched: %s\n", what,
              s.ok() ? "(ok?!)" : s.message().c_str(), untouched ? "yes" : "NO");
  return s.code() == StatusCode::kInvalidArgument && named && untouched;
}

}  // namespace

int main() {
  std::printf("indexer_q %s, %d tokens x %d heads, bf16\n", version(), int(B), int(H));
  Inputs in = make_inputs();
  bool ok = run_recipe(RecipeId::kV4Fp8, in);
  ok = run_recipe(RecipeId::kV4Fp4, in) && ok;

  std::printf("error handling:\n");
  Outputs fp4(true);
  OpArgs a = make_args(RecipeId::kV4Fp4, in, fp4);
  fp4.q.resize(B * H * D, 0xAB);  // a buffer sized for FP8 codes; FP4 wants (B, H, 64)
  a.q_out = TensorView::contiguous(fp4.q.data(), DType::kUInt8, {B, H, D});
  ok = expect_rejected("v4_fp4 with q_fp4 of shape (4, 8, 128):", a, fp4, "q_fp4") && ok;

  Outputs fp8(false);
  in.pos[2] = kMaxPos;
  ok = expect_rejected("v4_fp8 with positions[2] = max_pos:", make_args(RecipeId::kV4Fp8, in, fp8), fp8,
                       "positions") && ok;

  std::printf("%s\n", ok ? "example: ok" : "example: FAILED");
  return ok ? 0 : 1;
}
