// The validator core (src/common/op_args.h) on an op of its own: a table of arguments is all a
// new op writes for its checks. The toy op gathers M rows of a (R, C) table into (M, C) by an
// index vector; a second index vector (guard) skips rows where it is negative; an optional bias
// is taken only with a feature bit; a page_size-like integer binds a symbol that a derived one
// multiplies. Every message below comes from the core's rules, not from the toy op.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/op_args.h"

namespace {

using namespace indexer_q;
using namespace indexer_q::detail;

enum Sym { kR, kC, kM, kBlock, kCells, kNSyms };
constexpr SymSpec kSyms[kNSyms] = {sym("R", 1, "row count R"), sym("C"), sym("M"), sym("block"),
                                   derived_sym("cells", kM, kBlock, "M * block")};
enum Slot { kTable, kIdx, kGuard, kBias, kOut };
constexpr unsigned kHasBias = 1;

constexpr ArgSpec kArgs[] = {
    scalar(ScalarArg::kWeightScale, 0),
    tensor("table", kTable)
        .of(shape("contiguous rows (C, 1)", S(kR), S(kC)), ShapeMsg::kPerDim)
        .counted("R * C elements overflow")
        .dtype("fp32 or bf16", DType::kFloat32, DType::kBFloat16)
        .rows_at_least(),
    tensor("idx", kIdx).of(shape("contiguous (1,)", S(kM))).dtype("int32 or int64", DType::kInt32, DType::kInt64)
        .indexes(kR, "R", false, " (guard {guard})"),
    tensor("guard", kGuard).of(shape("contiguous (1,)", S(kM))).dtype("int64", DType::kInt64)
        .indexes(kCells, "M * block", true),
    int_pow2("block", 0, 1, 64, kBlock, "a power of two in [1, 64]"),
    tensor("bias", kBias).is(kHasBias, "has no bias").of(shape("contiguous (1,)", S(kC)), ShapeMsg::kRankFirst)
        .dtype_as(kTable),
    tensor("out", kOut).out()
        .of(shape("contiguous ({C}, 1)", S(kM), S(kC)), ShapeMsg::kRankFirst, " for op {op}")
        .dtype("fp32", DType::kFloat32),
};
constexpr OpSpec kToy{"toy", kSyms, kNSyms, kArgs, int(sizeof kArgs / sizeof kArgs[0]), kM};

struct Toy {
  std::vector<float> table = std::vector<float>(5 * 6, 1.0f), bias = std::vector<float>(4, 0.0f),
                     out = std::vector<float>(3 * 4, 0.0f);
  std::vector<std::int64_t> idx{0, 4, 2}, guard{1, -1, 5};
  TensorView t = TensorView::contiguous(table.data(), DType::kFloat32, {5, 4});
  TensorView i = TensorView::contiguous(idx.data(), DType::kInt64, {3});
  TensorView g = TensorView::contiguous(guard.data(), DType::kInt64, {3});
  TensorView b;  // empty: the op takes it only with kHasBias
  TensorView o = TensorView::contiguous(out.data(), DType::kFloat32, {3, 4});
  double scale = 0.5;
  std::int64_t block = 2;
  unsigned features = 0;

  Status check(OpCall* c = nullptr) const {
    OpCall local;
    OpCall& k = c ? *c : local;
    k.views[kTable] = &t;
    k.views[kIdx] = &i;
    k.views[kGuard] = &g;
    k.views[kBias] = &b;
    k.views[kOut] = &o;
    k.scalars[0] = scale;
    k.ints[0] = block;
    k.features = features;
    k.str("op", "toy");
    k.str("recipe", "plain");
    Options opt;
    opt.backend = Backend::kReference;
    return check_op_args(kToy, opt, &k);
  }
};

void expect_msg(const Toy& toy, const std::string& want) {
  const Status s = toy.check();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "indexer_q: " + want);
}

TEST(OpArgsCore, ValidCallBindsEverySymbol) {
  Toy toy;
  OpCall c;
  const Status s = toy.check(&c);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_FALSE(c.no_work);
  EXPECT_EQ(c.sym[kR], 5);
  EXPECT_EQ(c.sym[kC], 4);
  EXPECT_EQ(c.sym[kM], 3);
  EXPECT_EQ(c.sym[kBlock], 2);
  EXPECT_EQ(c.sym[kCells], 6);  // derived: M * block
  EXPECT_TRUE(c.taken[kTable] && c.taken[kOut]);
  EXPECT_FALSE(c.taken[kBias]);
}

TEST(OpArgsCore, ShapesDtypesStridesScalars) {
  {
    Toy toy;
    toy.scale = -1.0;
    expect_msg(toy, "weight_scale: expected a finite number > 0, got -1");
  }
  {
    Toy toy;
    toy.t.ndim = 1;
    expect_msg(toy, "table: expected 2 dims (R, C), got 1");
  }
  {
    Toy toy;
    toy.t.sizes[0] = 0;
    expect_msg(toy, "table: row count R must be >= 1, got 0");
  }
  {
    Toy toy;
    toy.t.sizes[0] = std::int64_t(1) << 40;
    toy.t.sizes[1] = std::int64_t(1) << 30;
    expect_msg(toy, "table: R * C elements overflow int64 (shape (1099511627776, 1073741824))");
  }
  {
    Toy toy;
    toy.t.dtype = DType::kInt32;
    expect_msg(toy, "table: expected dtype fp32 or bf16, got int32");
  }
  {
    Toy toy;  // rows at least C apart: a larger pitch is fine, a smaller one is not
    toy.t.strides[0] = 6;
    EXPECT_TRUE(toy.check().ok());
    toy.t.strides[0] = 3;
    expect_msg(toy, "table: unsupported strides (3, 1); expected contiguous rows (C, 1)");
  }
  {
    Toy toy;
    toy.g.sizes[0] = 2;
    expect_msg(toy, "guard: expected shape (3,) = (M,), got (2,)");
  }
  {
    Toy toy;
    toy.block = 3;
    expect_msg(toy, "block: expected a power of two in [1, 64], got 3");
  }
  {
    Toy toy;
    toy.o.sizes[1] = 5;
    expect_msg(toy, "out: expected shape (3, 4) = (M, C) for op toy, got (3, 5)");
  }
  {
    Toy toy;
    toy.o.ndim = -1;
    expect_msg(toy, "out: sizes and strides have different lengths");
  }
  {
    Toy toy;
    toy.o.strides[0] = 8;
    expect_msg(toy, "out: unsupported strides (8, 1); expected contiguous (4, 1)");
  }
}

TEST(OpArgsCore, FeaturesTakeOrRefuseATensor) {
  Toy toy;
  toy.b = TensorView::contiguous(toy.bias.data(), DType::kFloat32, {4});
  expect_msg(toy, "bias: recipe plain has no bias: expected an empty view (ndim 0, no data)");
  toy.features = kHasBias;
  EXPECT_TRUE(toy.check().ok()) << toy.check().message();
  toy.b.dtype = DType::kBFloat16;
  expect_msg(toy, "bias: expected the dtype of table (fp32), got bf16");
}

TEST(OpArgsCore, DevicesNullOverlapAndNoWork) {
  {
    Toy toy;
    toy.o.device = Device{DeviceType::kCUDA, 1};
    expect_msg(toy, "out: expected the device of table (cpu), got cuda:1");
  }
  {
    Toy toy;
    toy.i.data = nullptr;
    expect_msg(toy, "idx: data pointer is null while the tensor has 3 elements");
  }
  {
    Toy toy;
    toy.o.data = toy.table.data() + 2;
    expect_msg(toy, "out: output memory overlaps table");
  }
  {
    Toy toy;  // M = 0: valid, and no pointer or index is looked at
    toy.i.sizes[0] = toy.g.sizes[0] = toy.o.sizes[0] = 0;
    toy.i.data = nullptr;
    OpCall c;
    EXPECT_TRUE(toy.check(&c).ok());
    EXPECT_TRUE(c.no_work);
  }
}

TEST(OpArgsCore, IndexValuesGuardFirstNegativeSkips) {
  {
    Toy toy;  // row 1: guard -1 skips it, so its idx is not looked at
    toy.idx[1] = 99;
    EXPECT_TRUE(toy.check().ok()) << toy.check().message();
  }
  {
    Toy toy;
    toy.idx[2] = 5;
    expect_msg(toy, "idx: idx[2] = 5 is outside [0, R) = [0, 5) (guard 5)");
  }
  {
    Toy toy;  // the guard is checked before the row's idx
    toy.idx[0] = -3;
    toy.guard[0] = 6;
    expect_msg(toy, "guard: guard[0] = 6 is outside [0, M * block) = [0, 6)");
  }
}

}  // namespace
