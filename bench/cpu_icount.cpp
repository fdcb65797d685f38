// indexer_q_cpu_icount: retired instructions per row of the CPU backend, counted exactly by
// single-stepping (ptrace, Linux x86-64), for every ISA this processor runs -- AVX-512 included,
// which valgrind cannot execute. Deterministic, unlike timings on a shared machine.
//
//   indexer_q_cpu_icount [--op query|kside] [--isa all|LIST] [--recipe all|LIST] [--heads 64] [--tokens 8]
//                        [--dtype bf16|fp16|fp32] [--kside v4_k_fp8|all|LIST]
//
// Per case it counts the instructions of one 1-thread run() call at `tokens` and at 2 x `tokens`
// tokens (the same data) and prints the difference per row, so the call's fixed cost (the
// validator, dispatch) drops out and the per-token cost (the freqs row) stays in. Output (csv):
//   recipe,isa,dtype,heads,rows,insns_small,insns_large,insns_per_row
// --op kside (or --kside LIST, the same with LIST as its recipes) counts key-side stores instead
// (run(KStoreArgs), tokens x heads key tokens against twice that, page size 64, every token
// stored): the same columns, a row being one key token; --recipe then lists key recipes.
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "indexer_q/indexer_q.h"

using namespace indexer_q;

namespace {

struct Case {
  RecipeId rid;
  CpuIsa isa;
  bool kside = false;
  KRecipeId krid = KRecipeId::kV4KFp8;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    const std::size_t comma = s.find(',', pos);
    v.push_back(s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return v;
}

// The traced child: for every case, two calls (tokens, 2 * tokens), each between two SIGSTOPs.
int child_main(const std::vector<Case>& cases, long long H, long long tokens, DType dt) {
  const long long B = 2 * tokens;
  const std::size_t es = dtype_size(dt);
  std::mt19937 rng(7);
  const std::int64_t max_pos = 4096;
  std::vector<float> freqs(std::size_t(max_pos) * 64);
  for (auto& f : freqs) f = float(int(rng() % 20001) - 10000) * 1e-4f;
  std::vector<std::uint8_t> q(std::size_t(B * H) * 128 * es), out(std::size_t(B * H) * 128), sf(std::size_t(B * H) * 4),
      w(std::size_t(B * H) * es);
  for (std::size_t i = 0; i + 1 < q.size(); i += 2) {
    const std::uint16_t h = std::uint16_t(0x3c00 + int(rng() % 0x800) - 0x400) ^ std::uint16_t(rng() & 0x8000);
    std::memcpy(&q[i], &h, 2);
  }
  if (dt == DType::kFloat32)
    for (std::size_t i = 0; i < q.size(); i += 4) {
      const float f = float(int(rng() % 20001) - 10000) * 1e-3f;
      std::memcpy(&q[i], &f, 4);
    }
  for (std::size_t i = 0; i + 1 < w.size(); i += 2) {
    const std::uint16_t h = std::uint16_t(0x3c00 + int(rng() % 0x400));
    std::memcpy(&w[i], &h, 2);
  }
  std::vector<float> wo(static_cast<std::size_t>(B * H));
  std::vector<std::int64_t> pos(static_cast<std::size_t>(B));
  for (auto& p : pos) p = std::int64_t(rng() % max_pos);
  std::vector<std::uint8_t> kweight(128 * es);
  for (std::size_t i = 0; i + 1 < kweight.size(); i += 2) {
    const std::uint16_t h = std::uint16_t(0x3c00 + int(rng() % 0x400));
    std::memcpy(&kweight[i], &h, 2);
  }
  if (dt == DType::kFloat32)
    for (std::size_t i = 0; i < kweight.size(); i += 4) {
      const float f = 1.0f + float(int(rng() % 1001)) * 1e-3f;
      std::memcpy(&kweight[i], &f, 4);
    }
  std::vector<std::int64_t> kpos(static_cast<std::size_t>(B * H)), kslots(static_cast<std::size_t>(B * H));
  for (std::size_t i = 0; i < kpos.size(); ++i) {
    kpos[i] = std::int64_t(rng() % max_pos);
    kslots[i] = std::int64_t(i);
  }
  for (const Case& cs : cases) {
    if (cs.kside) {
      const std::int64_t page = 64, tb = kside_token_bytes(cs.krid);
      const std::int64_t pages = (B * H + page - 1) / page;
      std::vector<std::uint8_t> cache(static_cast<std::size_t>(pages * page * tb));
      for (long long b : {tokens, B}) {
        KStoreArgs a;
        a.recipe = cs.krid;
        a.input = TensorView::contiguous(q.data(), dt, {b * H, 128});
        a.weight = TensorView::contiguous(kweight.data(), dt, {128});
        a.freqs = TensorView::contiguous(freqs.data(), DType::kFloat32, {max_pos, 64});
        a.positions = TensorView::contiguous(kpos.data(), DType::kInt64, {b * H});
        a.slots = TensorView::contiguous(kslots.data(), DType::kInt64, {b * H});
        a.kvcache = TensorView::contiguous(cache.data(), DType::kUInt8, {pages, page * tb});
        a.page_size = page;
        Options opt;
        opt.backend = Backend::kCpu;
        opt.cpu_isa = cs.isa;
        opt.num_threads = 1;
        if (!run(a, opt).ok()) return 1;
        raise(SIGSTOP);
        const Status st = run(a, opt);
        raise(SIGSTOP);
        if (!st.ok()) return 1;
      }
      continue;
    }
    const Recipe& rc = recipe(cs.rid);
    const bool fp4 = rc.format == OutFormat::kE2M1;
    const std::int64_t od = fp4 ? 64 : 128;
    const DType qdt = fp4 ? DType::kUInt8 : rc.format == OutFormat::kE4M3FNUZ ? DType::kFloat8E4M3FNUZ : DType::kFloat8E4M3;
    for (long long b : {tokens, B}) {
      OpArgs a;
      a.recipe = cs.rid;
      a.q_input = TensorView::contiguous(q.data(), dt, {b, H, 128});
      a.q_out = TensorView::contiguous(out.data(), qdt, {b, H, od});
      if (fp4) a.q_scale = TensorView::contiguous(sf.data(), DType::kInt32, {b, H});
      else if (rc.scale_out) a.q_scale = TensorView::contiguous(sf.data(), DType::kFloat32, {b, H});
      if (recipe_has_weights(rc)) {
        a.weight = TensorView::contiguous(w.data(), dt, {b, H});
        a.weights_out = TensorView::contiguous(wo.data(), DType::kFloat32, {b, H, 1});
      }
      a.weight_scale = 0.5f;
      a.head_scale = 0.125f;
      if (recipe_has_rope(rc)) {
        a.freqs = TensorView::contiguous(freqs.data(), DType::kFloat32, {max_pos, 64});
        a.positions = TensorView::contiguous(pos.data(), DType::kInt64, {b});
      }
      Options opt;
      opt.backend = Backend::kCpu;
      opt.cpu_isa = cs.isa;
      opt.num_threads = 1;
      if (!run(a, opt).ok()) return 1;  // warm (page faults, lazy binding) outside the count
      raise(SIGSTOP);
      const Status st = run(a, opt);
      raise(SIGSTOP);
      if (!st.ok()) return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string isa_arg = "all", recipe_arg = "all", dtype_arg = "bf16", kside_arg, op_arg = "query";
  long long H = 64, tokens = 8;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) { std::fprintf(stderr, "incomplete argument '%s'\n", a.c_str()); return 2; }
    if (a == "--op") op_arg = argv[++i];
    else if (a == "--isa") isa_arg = argv[++i];
    else if (a == "--recipe") recipe_arg = argv[++i];
    else if (a == "--heads") H = std::atoll(argv[++i]);
    else if (a == "--tokens") tokens = std::atoll(argv[++i]);
    else if (a == "--dtype") dtype_arg = argv[++i];
    else if (a == "--kside") kside_arg = argv[++i];
    else { std::fprintf(stderr, "unknown argument '%s'\n", a.c_str()); return 2; }
  }
  if (op_arg == "kside") {
    if (kside_arg.empty()) kside_arg = recipe_arg;
  } else if (op_arg != "query") {
    std::fprintf(stderr, "bad --op '%s' (query or kside)\n", op_arg.c_str());
    return 2;
  }
  DType dt = DType::kBFloat16;
  if (dtype_arg == "fp16") dt = DType::kFloat16;
  else if (dtype_arg == "fp32") dt = DType::kFloat32;
  else if (dtype_arg != "bf16") { std::fprintf(stderr, "bad --dtype\n"); return 2; }
  std::vector<CpuIsa> isas;
  if (isa_arg == "all") isas = supported_cpu_isas();
  else
    for (const std::string& n : split(isa_arg)) {
      CpuIsa isa;
      if (!parse_cpu_isa(n, &isa) || !cpu_isa_supported(isa)) { std::fprintf(stderr, "bad --isa '%s'\n", n.c_str()); return 2; }
      isas.push_back(isa);
    }
  std::vector<RecipeId> recipes;
  if (recipe_arg == "all") recipes = all_recipes();
  else if (kside_arg.empty())  // --recipe lists key recipes with --op kside
    for (const std::string& n : split(recipe_arg)) {
      RecipeId rid;
      if (!parse_recipe(n, &rid)) { std::fprintf(stderr, "bad --recipe '%s'\n", n.c_str()); return 2; }
      recipes.push_back(rid);
    }
  std::vector<Case> cases;
  if (!kside_arg.empty()) {
    std::vector<KRecipeId> krecipes;
    if (kside_arg == "all") krecipes = all_krecipes();
    else
      for (const std::string& n : split(kside_arg)) {
        KRecipeId k;
        if (!parse_krecipe(n, &k)) { std::fprintf(stderr, "bad key recipe '%s'\n", n.c_str()); return 2; }
        krecipes.push_back(k);
      }
    for (KRecipeId k : krecipes)
      for (CpuIsa i : isas) cases.push_back({RecipeId::kV4Fp8, i, true, k});
  } else {
    for (RecipeId r : recipes)
      for (CpuIsa i : isas) cases.push_back({r, i});
  }

  const pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    ptrace(PTRACE_TRACEME, 0, nullptr, nullptr);
    std::_Exit(child_main(cases, H, tokens, dt));
  }
  std::printf("recipe,isa,dtype,heads,rows,insns_small,insns_large,insns_per_row\n");
  std::vector<unsigned long long> counts;
  bool counting = false;
  unsigned long long n = 0;
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, 0) < 0) return 1;
    if (WIFEXITED(status)) {
      if (WEXITSTATUS(status) != 0) { std::fprintf(stderr, "child failed (%d)\n", WEXITSTATUS(status)); return 1; }
      break;
    }
    if (WIFSIGNALED(status)) { std::fprintf(stderr, "child killed by signal %d\n", WTERMSIG(status)); return 1; }
    if (!WIFSTOPPED(status)) continue;
    const int sig = WSTOPSIG(status);
    if (sig == SIGSTOP) {
      if (!counting) {
        counting = true;
        n = 0;
      } else {
        counting = false;
        counts.push_back(n);
        if (counts.size() % 2 == 0) {
          const Case& cs = cases[counts.size() / 2 - 1];
          const unsigned long long a = counts[counts.size() - 2], b = counts.back();
          std::printf("%s,%s,%s,%lld,%lld,%llu,%llu,%.2f\n", cs.kside ? krecipe_name(cs.krid) : recipe_name(cs.rid),
                      cpu_isa_name(cs.isa), dtype_name(dt), H,
                      tokens * H, a, b, double(b - a) / double(tokens * H));
          std::fflush(stdout);
        }
      }
      ptrace(counting ? PTRACE_SINGLESTEP : PTRACE_CONT, pid, nullptr, nullptr);
      continue;
    }
    if (sig == SIGTRAP && counting) {
      ++n;
      ptrace(PTRACE_SINGLESTEP, pid, nullptr, nullptr);
      continue;
    }
    ptrace(counting ? PTRACE_SINGLESTEP : PTRACE_CONT, pid, nullptr, reinterpret_cast<void*>(long(sig)));
  }
  return 0;
}
