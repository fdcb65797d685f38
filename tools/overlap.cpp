// indexer-q run --key-recipe K: the top-k overlap of the indexer's scores (docs/RECALL.md).
//
// For each context length T: a synthetic DeepSeek-shaped case (B query tokens decoding right after
// T key tokens), the query recipe and the key recipe run through the library's public API (host
// memory: the cpu or reference backend), the outputs dequantized as they are stored, and the
// scores sum_h w[h] * relu(q[h] . k[t]) of each query token compared, as top-k sets, with float64
// scores of the unquantized inputs after each side's RoPE (the key after its RMSNorm). The
// Hadamard is left out of the reference: it is orthonormal, and applied to both sides it does not
// change q . k; applied to one side only it makes the quantized scores q . (H k), and the overlap
// collapses, which is what the mismatch warning is about.
#include "overlap.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "cli.h"
#include "indexer_q/indexer_q.h"
#include "kside_cli.h"

namespace indexer_q {
namespace cli {

namespace {

// The key side's transform, the same for every key-side recipe (docs/KSIDE.md "What one token goes
// through"): RMSNorm, RoPE on dims 64..127 with adjacent pairs, interleaved freqs, the Hadamard.
constexpr RopeDims kKeyRopeDims = RopeDims::kLast64;
constexpr RopePairs kKeyRopePairs = RopePairs::kAdjacent;
constexpr bool kKeyHadamard = true;

std::vector<OptionSpec> overlap_options() {
  return {
      {"recipe", "NAME", "the query recipe (default v4_fp8)"},
      {"key-recipe", "K", "the key recipe: " + krecipe_names() + " (given: this report)"},
      {"context", "T[,T...]", "context lengths (key tokens), each 1..1048576 (default\n1024,4096,16384,65536)"},
      {"topk", "K[,K...]", "top-k sizes, each >= 1; a k above a context is skipped (default 64,2048)"},
      {"queries", "B", "query tokens per context, 1..1024 (default 4)"},
      {"heads", "H", "heads per query token, 1..1024 (default 64)"},
      {"dtype", "D", "q / k / weight dtype: bf16|fp32 (default bf16)"},
      {"seed", "S", "workload seed, >= 0 (default 1)"},
      {"outliers", "N", "outlier channels of q and k (the same dims), 0..128 (default 4)"},
      {"outlier-scale", "X", "their magnitude relative to the others, 1..1000000 (default 30)"},
      {"page-size", "P", "key cache page size, a power of two 1..4096 (default 64)"},
      {"backend", "B", "cpu|reference (default cpu)"},
  };
}

const char* kOverlapDescription =
    "What the indexer is for, measured: each query token scores the key tokens of its context,\n"
    "score[t] = sum_h w[h] * relu(q[h] . k[t]), and attention reads the top k. This runs the query\n"
    "recipe and the key recipe through the library on a synthetic case per context length (q, k ~\n"
    "N(0,1) with outlier channels, w ~ N(0,1), weight_scale = 1/sqrt(H*128), head_scale = 1/sqrt(H),\n"
    "RMSNorm weight 1 + N(0, 0.01), RoPE theta 10000; queries at positions T..T+B-1, keys at\n"
    "0..T-1) and reports the mean (and worst) over the query tokens of |top-k(ours) & top-k(ref)| / k:\n"
    "ours = the scores of the dequantized outputs (query FP8 codes with weights_out, which holds the\n"
    "row scale; FP4 codes times their block scales; key codes times their scales), ref = float64\n"
    "scores of the inputs after RoPE (the key after RMSNorm), weights w * weight_scale (* head_scale\n"
    "for the two-factor folds), no Hadamard (orthonormal: applied to both sides it cancels).\n"
    "A pair whose sides do not transform alike (one rotated by the Hadamard and the other not, or\n"
    "RoPE on other dims / pairs) is reported with a warning: with one Hadamard the scores are\n"
    "q . (H k) and the overlap falls to about chance (k / T).\n"
    "Exit status: 0 (a mismatched pair included), 1 on a library error, 2 for a bad command line.";

// Deterministic normal variates (splitmix64 + Box-Muller): the same on every platform.
struct Rng {
  std::uint64_t s;
  bool have = false;
  double spare = 0.0;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return double((next() >> 11) + 1) * 0x1.0p-53; }  // (0, 1]
  double normal() {
    if (have) {
      have = false;
      return spare;
    }
    const double r = std::sqrt(-2.0 * std::log(uniform())), a = 6.283185307179586 * uniform();
    spare = r * std::sin(a);
    have = true;
    return r * std::cos(a);
  }
};

std::uint16_t to_bf16(float f) {  // nearest even (finite inputs only here)
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return std::uint16_t(u >> 16);
}
float from_bf16(std::uint16_t h) {
  const std::uint32_t u = std::uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Values stored as `dt` (bf16 or fp32): the bytes the library reads and the values they hold.
struct Stored {
  std::vector<std::uint8_t> bytes;
  std::vector<double> values;
};
Stored store(const std::vector<double>& v, DType dt) {
  Stored s;
  s.values.resize(v.size());
  s.bytes.resize(v.size() * dtype_size(dt));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const float f = float(v[i]);
    if (dt == DType::kBFloat16) {
      const std::uint16_t h = to_bf16(f);
      std::memcpy(s.bytes.data() + 2 * i, &h, 2);
      s.values[i] = from_bf16(h);
    } else {
      std::memcpy(s.bytes.data() + 4 * i, &f, 4);
      s.values[i] = f;
    }
  }
  return s;
}

// Code values of the output formats (docs/RECIPES.md).
double e4m3fn_value(std::uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return NAN;
  const double mag = e == 0 ? std::ldexp(double(m), -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (b & 0x80) ? -mag : mag;
}
double e4m3fnuz_value(std::uint8_t b) {  // bias 8, no infinities, 0x80 is the NaN
  if (b == 0x80) return NAN;
  const int e = (b >> 3) & 15, m = b & 7;
  const double mag = e == 0 ? std::ldexp(double(m), -10) : std::ldexp(1.0 + m / 8.0, e - 8);
  return (b & 0x80) ? -mag : mag;
}
double e2m1_value(unsigned nib) {
  static const double mag[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  return (nib & 8u) ? -mag[nib & 7u] : mag[nib & 7u];
}
// 128 values from 64 packed E2M1 bytes (low nibble = even dim) and 4 UE8M0 block-scale bytes.
void e2m1_row(const std::uint8_t* codes, const std::uint8_t* sf, double* out) {
  for (int i = 0; i < 128; ++i) {
    const unsigned nib = (i & 1) ? (codes[i / 2] >> 4) : (codes[i / 2] & 0xfu);
    out[i] = e2m1_value(nib) * std::ldexp(1.0, int(sf[i / 32]) - 127);
  }
}

// RoPE in float64 on one row, pair j by the angle whose (cos, sin) is f[2j], f[2j + 1].
void rope64(double* y, const float* f, RopeDims dims, RopePairs pairs) {
  if (dims == RopeDims::kNoRope) return;
  const int o = dims == RopeDims::kLast64 ? 64 : 0;
  for (int j = 0; j < 32; ++j) {
    double* v0 = y + o + (pairs == RopePairs::kNeox ? j : 2 * j);
    double* v1 = y + o + (pairs == RopePairs::kNeox ? j + 32 : 2 * j + 1);
    const double c = f[2 * j], s = f[2 * j + 1], x0 = *v0, x1 = *v1;
    *v0 = x0 * c - x1 * s;
    *v1 = x0 * s + x1 * c;
  }
}

// "" if the pair transforms alike, else what differs (one line).
std::string pair_mismatch(RecipeId q, KRecipeId k) {
  const Recipe& r = recipe(q);
  const std::string qn = recipe_name(q), kn = krecipe_name(k);
  std::string out;
  auto add = [&out](const std::string& s) { out += (out.empty() ? "" : "; ") + s; };
  if (r.hadamard != kKeyHadamard) {
    const std::string& rot = r.hadamard ? qn : kn;
    const std::string& plain = r.hadamard ? kn : qn;
    add(rot + " applies the Hadamard transform and " + plain + " does not, so the scores are q . (H k), not q . k");
  }
  if (recipe_has_rope(r) && r.rope_dims != kKeyRopeDims)
    add(std::string("RoPE on dims ") + value_name(r.rope_dims) + " (" + qn + ") vs " + value_name(kKeyRopeDims) + " (" +
        kn + ")");
  if (recipe_has_rope(r) && r.rope_pairs != kKeyRopePairs)
    add(std::string("RoPE pairs ") + value_name(r.rope_pairs) + " (" + qn + ") vs " + value_name(kKeyRopePairs) + " (" +
        kn + ")");
  return out;
}

// score[b][t] = sum_h w[b][h] * relu(q[b][h] . k[t]), q (B, H, 128), w (B, H), k (T, 128).
std::vector<double> scores(const std::vector<double>& q, const std::vector<double>& w, const std::vector<double>& k,
                           std::int64_t B, std::int64_t H, std::int64_t T) {
  std::vector<double> s(std::size_t(B * T), 0.0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t) {
      const double* kt = k.data() + t * 128;
      double acc = 0.0;
      for (std::int64_t h = 0; h < H; ++h) {
        const double* qh = q.data() + (b * H + h) * 128;
        double d = 0.0;
        for (int i = 0; i < 128; ++i) d += qh[i] * kt[i];
        if (d > 0.0) acc += w[std::size_t(b * H + h)] * d;
      }
      s[std::size_t(b * T + t)] = acc;
    }
  return s;
}

std::vector<std::int64_t> topk_of(const double* s, std::int64_t T, std::int64_t k) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(T));
  for (std::int64_t i = 0; i < T; ++i) idx[std::size_t(i)] = i;
  std::nth_element(idx.begin(), idx.begin() + (k - 1), idx.end(), [s](std::int64_t a, std::int64_t b) {
    return s[a] > s[b] || (s[a] == s[b] && a < b);
  });
  idx.resize(std::size_t(k));
  std::sort(idx.begin(), idx.end());
  return idx;
}

struct Case {
  std::int64_t B, H, T, max_pos;
  Stored q, w, k, nw;
  std::vector<float> freqs, freqs_halves;  // interleaved (the key's and the model's); halves
  std::vector<std::int64_t> qpos, kpos;
  float weight_scale, head_scale;
};

Case make_case(std::int64_t B, std::int64_t H, std::int64_t T, DType dt, std::uint64_t seed, int outliers,
               double outlier_scale) {
  Case c;
  c.B = B;
  c.H = H;
  c.T = T;
  c.max_pos = T + B;
  Rng g{seed * 0x2545f4914f6cdd1dull + std::uint64_t(T)};
  std::vector<double> boost(128, 1.0);
  std::vector<int> dims(128);
  for (int i = 0; i < 128; ++i) dims[std::size_t(i)] = i;
  for (int i = 0; i < outliers; ++i) {  // a partial Fisher-Yates shuffle picks the dims
    const int j = i + int(g.next() % std::uint64_t(128 - i));
    std::swap(dims[std::size_t(i)], dims[std::size_t(j)]);
    boost[std::size_t(dims[std::size_t(i)])] = outlier_scale;
  }
  std::vector<double> v(std::size_t(B * H * 128));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = g.normal() * boost[i % 128];
  c.q = store(v, dt);
  v.assign(std::size_t(T * 128), 0.0);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = g.normal() * boost[i % 128];
  c.k = store(v, dt);
  v.assign(std::size_t(B * H), 0.0);
  for (double& x : v) x = g.normal();
  c.w = store(v, dt);
  v.assign(128, 0.0);
  for (double& x : v) x = 1.0 + 0.1 * g.normal();
  c.nw = store(v, dt);
  c.freqs.resize(std::size_t(c.max_pos * 64));
  c.freqs_halves.resize(c.freqs.size());
  for (std::int64_t p = 0; p < c.max_pos; ++p)
    for (int j = 0; j < 32; ++j) {
      const double a = double(p) * std::pow(10000.0, -2.0 * j / 64.0);
      const float cs = float(std::cos(a)), sn = float(std::sin(a));
      c.freqs[std::size_t(p * 64 + 2 * j)] = cs;
      c.freqs[std::size_t(p * 64 + 2 * j + 1)] = sn;
      c.freqs_halves[std::size_t(p * 64 + j)] = cs;
      c.freqs_halves[std::size_t(p * 64 + 32 + j)] = sn;
    }
  for (std::int64_t b = 0; b < B; ++b) c.qpos.push_back(T + b);
  for (std::int64_t t = 0; t < T; ++t) c.kpos.push_back(t);
  c.weight_scale = float(1.0 / std::sqrt(double(H) * 128.0));
  c.head_scale = float(1.0 / std::sqrt(double(H)));
  return c;
}

struct Scores {
  std::vector<double> ours, ref;
};

// Runs both sides through the library and scores them; false (with *err) on a library error.
bool run_case(const Case& c, RecipeId qr, KRecipeId kr, DType dt, std::int64_t page_size, const Options& opts,
              Scores* out, std::string* err) {
  const Recipe& r = recipe(qr);
  const bool fp4 = recipe_has_block_scales(r), rope = recipe_has_rope(r), weights = recipe_has_weights(r);
  const std::int64_t B = c.B, H = c.H, T = c.T, rows = B * H;
  // The query side.
  std::vector<std::uint8_t> q_out(std::size_t(rows * (fp4 ? 64 : 128)));
  std::vector<std::uint8_t> q_sf(std::size_t(rows * 4));
  std::vector<float> w_out(static_cast<std::size_t>(rows));
  OpArgs a;
  a.recipe = qr;
  a.q_input = TensorView::contiguous(c.q.bytes.data(), dt, {B, H, 128});
  a.q_out = TensorView::contiguous(q_out.data(), DType::kUInt8, {B, H, fp4 ? 64 : 128});
  if (fp4) a.q_scale = TensorView::contiguous(q_sf.data(), DType::kInt32, {B, H});
  else if (r.scale_out) a.q_scale = TensorView::contiguous(q_sf.data(), DType::kFloat32, {B, H, 1});
  if (weights) {
    a.weight = TensorView::contiguous(c.w.bytes.data(), dt, {B, H});
    a.weights_out = TensorView::contiguous(w_out.data(), DType::kFloat32, {B, H, 1});
  }
  a.weight_scale = c.weight_scale;
  a.head_scale = c.head_scale;
  if (rope) {
    const bool halves = r.freqs_layout == FreqsLayout::kHalves;
    a.freqs = TensorView::contiguous(halves ? c.freqs_halves.data() : c.freqs.data(), DType::kFloat32, {c.max_pos, 64});
    a.positions = TensorView::contiguous(c.qpos.data(), DType::kInt64, {B});
  }
  Status s = run(a, opts);
  if (!s.ok()) {
    *err = std::string("query side (") + recipe_name(qr) + "): " + s.message();
    return false;
  }
  // The key side: token t into slot t.
  const std::int64_t tb = kside_token_bytes(kr), pages = (T + page_size - 1) / page_size;
  std::vector<std::uint8_t> cache(std::size_t(pages * tb * page_size), 0);
  std::vector<std::int64_t> slots(static_cast<std::size_t>(T));
  for (std::int64_t t = 0; t < T; ++t) slots[std::size_t(t)] = t;
  KStoreArgs k;
  k.recipe = kr;
  k.input = TensorView::contiguous(c.k.bytes.data(), dt, {T, 128});
  k.weight = TensorView::contiguous(c.nw.bytes.data(), dt, {128});
  k.eps = 1e-6f;
  k.freqs = TensorView::contiguous(c.freqs.data(), DType::kFloat32, {c.max_pos, 64});
  k.positions = TensorView::contiguous(c.kpos.data(), DType::kInt64, {T});
  k.slots = TensorView::contiguous(slots.data(), DType::kInt64, {T});
  k.kvcache = TensorView::contiguous(cache.data(), DType::kUInt8, {pages, tb * page_size});
  k.page_size = page_size;
  s = run(k, opts);
  if (!s.ok()) {
    *err = std::string("key side (") + krecipe_name(kr) + "): " + s.message();
    return false;
  }
  // Dequantized, as stored.
  const std::size_t nq = static_cast<std::size_t>(rows * 128), nw = static_cast<std::size_t>(rows),
                    nk = static_cast<std::size_t>(T * 128);
  std::vector<double> qd(nq), wd(nw), kd(nk);
  for (std::int64_t i = 0; i < rows; ++i) {
    double* y = qd.data() + i * 128;
    if (fp4) {
      e2m1_row(q_out.data() + i * 64, q_sf.data() + i * 4, y);
    } else {
      for (int d = 0; d < 128; ++d) {
        const std::uint8_t b = q_out[std::size_t(i * 128 + d)];
        y[d] = r.format == OutFormat::kE4M3FNUZ ? e4m3fnuz_value(b) : e4m3fn_value(b);
      }
    }
    // weights_out holds the FP8 row scale (docs/RECIPES.md: dequant(q) * weights_out); a recipe
    // without weights: the raw factor (FP4 only: its scales are in q_sf).
    wd[std::size_t(i)] = weights ? double(w_out[std::size_t(i)]) : c.w.values[std::size_t(i)] * double(c.weight_scale);
  }
  const bool kfp4 = krecipe_format(kr) == OutFormat::kE2M1;
  for (std::int64_t t = 0; t < T; ++t) {
    const std::uint8_t* page = cache.data() + (t / page_size) * tb * page_size;
    const std::int64_t row = t % page_size;
    double* y = kd.data() + t * 128;
    if (kfp4) {
      e2m1_row(page + row * 64, page + page_size * 64 + row * 4, y);
    } else {
      float sc;
      std::memcpy(&sc, page + page_size * 128 + row * 4, 4);
      for (int d = 0; d < 128; ++d) y[d] = e4m3fn_value(page[row * 128 + d]) * double(sc);
    }
  }
  // float64 reference of the inputs.
  std::vector<double> q64(nq), w64(nw), k64(nk);
  const bool two = recipe_uses_head_scale(r);
  for (std::int64_t i = 0; i < rows; ++i) {
    double* y = q64.data() + i * 128;
    for (int d = 0; d < 128; ++d) y[d] = c.q.values[std::size_t(i * 128 + d)];
    rope64(y, c.freqs.data() + c.qpos[std::size_t(i / H)] * 64, r.rope_dims, r.rope_pairs);
    w64[std::size_t(i)] =
        c.w.values[std::size_t(i)] * double(c.weight_scale) * (two ? double(c.head_scale) : 1.0);
  }
  for (std::int64_t t = 0; t < T; ++t) {
    double* y = k64.data() + t * 128;
    double ss = 0.0;
    for (int d = 0; d < 128; ++d) ss += c.k.values[std::size_t(t * 128 + d)] * c.k.values[std::size_t(t * 128 + d)];
    const double nf = 1.0 / std::sqrt(ss / 128.0 + 1e-6);
    for (int d = 0; d < 128; ++d) y[d] = c.k.values[std::size_t(t * 128 + d)] * nf * c.nw.values[std::size_t(d)];
    rope64(y, c.freqs.data() + c.kpos[std::size_t(t)] * 64, kKeyRopeDims, kKeyRopePairs);
  }
  out->ours = scores(qd, wd, kd, B, H, T);
  out->ref = scores(q64, w64, k64, B, H, T);
  return true;
}

}  // namespace

bool argv_asks_overlap(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "--key-recipe" || s.rfind("--key-recipe=", 0) == 0) return true;
  }
  return false;
}

int cmd_run_overlap(int argc, char** argv) {
  Args a("run", overlap_options(), argc, argv);
  if (a.help()) {
    std::fputs(a.help_text("indexer-q run --key-recipe K [options]", kOverlapDescription, recipes_help()).c_str(),
               stdout);
    return 0;
  }
  if (!a.positional().empty()) throw UsageError("unexpected argument '" + a.positional()[0] + "'");
  const RecipeId qr = parse_recipe_option(a);
  const std::string kname = a.str("key-recipe", "");
  KRecipeId kr;
  if (!parse_krecipe(kname, &kr))
    throw UsageError("option --key-recipe: unknown key recipe '" + kname + "'; expected " + krecipe_names());
  const std::vector<std::int64_t> contexts = a.int_list("context", {1024, 4096, 16384, 65536}, 1, 1 << 20);
  const std::vector<std::int64_t> topks = a.int_list("topk", {64, 2048}, 1, 1 << 20);
  const std::int64_t B = a.integer("queries", 4, 1, 1024), H = a.integer("heads", 64, 1, 1024);
  const std::string dts = a.choice("dtype", "bf16", {"bf16", "fp32"});
  const DType dt = dts == "bf16" ? DType::kBFloat16 : DType::kFloat32;
  const std::uint64_t seed = std::uint64_t(a.integer("seed", 1, 0, INT64_MAX));
  const int outliers = int(a.integer("outliers", 4, 0, 128));
  const double oscale = double(a.integer("outlier-scale", 30, 1, 1000000));
  const std::int64_t ps = a.integer("page-size", 64, 1, 4096);
  if ((ps & (ps - 1)) != 0) throw UsageError("option --page-size: expected a power of two, got " + std::to_string(ps));
  const std::string be = a.choice("backend", "cpu", {"cpu", "reference"});
  Options opts;
  opts.backend = be == "cpu" ? Backend::kCpu : Backend::kReference;

  const std::string mismatch = pair_mismatch(qr, kr);
  std::printf("indexer-q run: top-k overlap of the indexer's scores (indexer_q %s)\n", version());
  std::printf("  query recipe %s: %s\n", recipe_name(qr), recipe_summary(qr).c_str());
  std::printf("  key recipe   %s: RMSNorm, rope_dims last64; rope_pairs adjacent; hadamard\n", krecipe_name(kr));
  if (mismatch.empty()) {
    std::printf("  pair         matches (both sides transform alike)\n");
  } else {
    std::printf("  pair         warning: MISMATCHED: %s\n", mismatch.c_str());
    std::fprintf(stderr, "indexer-q run: warning: query recipe %s and key recipe %s do not match: %s\n",
                 recipe_name(qr), krecipe_name(kr), mismatch.c_str());
  }
  std::printf("  workload     %lld query tokens x %lld heads, %s, seed %llu, %d outlier channels (%gx), backend %s\n",
              (long long)B, (long long)H, dts.c_str(), (unsigned long long)seed, outliers, oscale, be.c_str());
  std::printf("  scores       sum_h w[h] relu(q[h] . k[t]): dequantized outputs vs float64 of the inputs\n");
  std::printf("  context      k   overlap  worst query   chance (k / T)\n");
  for (std::int64_t T : contexts) {
    const Case c = make_case(B, H, T, dt, seed, outliers, oscale);
    Scores sc;
    std::string err;
    if (!run_case(c, qr, kr, dt, ps, opts, &sc, &err)) {
      std::fprintf(stderr, "indexer-q run: %s\n", err.c_str());
      return 1;
    }
    for (std::int64_t k : topks) {
      if (k > T) continue;
      double sum = 0.0, worst = 1.0;
      for (std::int64_t b = 0; b < B; ++b) {
        const auto x = topk_of(sc.ours.data() + b * T, T, k), y = topk_of(sc.ref.data() + b * T, T, k);
        std::vector<std::int64_t> both;
        std::set_intersection(x.begin(), x.end(), y.begin(), y.end(), std::back_inserter(both));
        const double o = double(both.size()) / double(k);
        sum += o;
        worst = std::min(worst, o);
      }
      std::printf("  %7lld %6lld   %7.4f  %7.4f       %7.4f%s\n", (long long)T, (long long)k, sum / double(B), worst,
                  double(k) / double(T), mismatch.empty() ? "" : "   (mismatched pair)");
    }
  }
  return 0;
}

}  // namespace cli
}  // namespace indexer_q
