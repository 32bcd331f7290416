// The GPU plugins' GEMM plan (plugins/common/ops_gemm.cpp's gemm_plan): which tiles and how many
// parts of K a product takes on a device with given traits. The GPUs that take these paths are
// not in CI (lavapipe and PoCL are CPU drivers), so their choices are pinned here, for an
// H100/H200-like device: 132 compute units, NVIDIA's tile sets.
#include <gtest/gtest.h>

#include "../../plugins/common/ops.h"

using tessera::common::gemm_plan;
using tessera::common::GemmPlan;
using tessera::common::GpuTraits;

namespace {

GpuTraits hopper(bool one_buffer) {
  GpuTraits t;
  t.vendor_id = 0x10de;
  t.subgroup_size = 32;
  t.max_group_size = 1024;
  t.max_shared_bytes = 48 * 1024;
  t.compute_units = 132;
  t.gemm_one_buffer = one_buffer;
  return t;
}

void expect_plan(const GemmPlan& p, int tm, int tn, int buffers, std::int64_t parts,
                 std::int64_t per) {
  EXPECT_EQ(p.tiles.tm, tm);
  EXPECT_EQ(p.tiles.tn, tn);
  EXPECT_EQ(p.tiles.buffers, buffers);
  EXPECT_EQ(p.parts, parts);
  EXPECT_EQ(p.per, per);
}

}  // namespace

TEST(GemmPlan, ALargeGridTakesTheLargestTilesOverTheWholeK) {
  // 2048^3: 256 tiles of 128 x 128 for 132 units; the GPT's forward product 384 of them.
  expect_plan(gemm_plan(hopper(false), 2048, 2048, 2048, 1), 128, 128, 2, 1, 2048);
  expect_plan(gemm_plan(hopper(false), 16384, 384, 1536, 1), 128, 128, 2, 1, 1536);
  // Through Vulkan's SPIR-V on NVIDIA the largest tiles stage K through one buffer.
  expect_plan(gemm_plan(hopper(true), 2048, 2048, 2048, 1), 128, 128, 1, 1, 2048);
}

TEST(GemmPlan, ASmallGridWithAShortKTakesSmallerTiles) {
  // 1024 x 1024 x 512: 64 tiles of 128 x 128 would leave half the units idle, and K is too short
  // to split (parts of at least 512, from 1024): 128 tiles of 64 x 128.
  expect_plan(gemm_plan(hopper(false), 1024, 1024, 512, 1), 64, 128, 2, 1, 512);
}

TEST(GemmPlan, ASmallGridSplitsKFrom1024OneWorkGroupAUnit) {
  // 1024^3: the largest tiles (64 of them) with K in two parts of 512: 128 work-groups.
  expect_plan(gemm_plan(hopper(false), 1024, 1024, 1024, 1), 128, 128, 2, 2, 512);
  // The CNN's 1600-long linear layer at batch 128: one tile, K in three parts of 544 (a multiple
  // of the 16-long slices).
  expect_plan(gemm_plan(hopper(false), 128, 128, 1600, 1), 128, 128, 2, 3, 544);
  // Two matrices of 64 x 64: two tiles, 1100 in two parts.
  expect_plan(gemm_plan(hopper(false), 64, 64, 1100, 2), 128, 128, 2, 2, 560);
}

TEST(GemmPlan, ARaggedLastWaveSplitsK) {
  // 1536^3: 144 tiles on 132 units, two waves for the work of 1.09; in three parts of 512, four
  // waves of a third of K each (1.33).
  expect_plan(gemm_plan(hopper(false), 1536, 1536, 1536, 1), 128, 128, 2, 3, 512);
  // 1792^3: 196 tiles, two waves; two parts of 896, three waves of half of K.
  expect_plan(gemm_plan(hopper(false), 1792, 1792, 1792, 1), 128, 128, 2, 2, 896);
  // A K of 2048 or more whose grid is more than half the wave of two work-groups a unit (which
  // the long-K split leaves whole): four parts, at most.
  expect_plan(gemm_plan(hopper(false), 1536, 1536, 4096, 1), 128, 128, 2, 4, 1024);
  // Where the parts would not cut the waves by a fifth, K stays whole: 3072^3 (576 tiles: 5
  // waves, 4.5 in two parts), the GPT's forward (384 tiles: 3 waves whole or in parts).
  expect_plan(gemm_plan(hopper(false), 3072, 3072, 3072, 1), 128, 128, 2, 1, 3072);
  expect_plan(gemm_plan(hopper(false), 16384, 384, 1536, 1), 128, 128, 2, 1, 1536);
  // K below 1024 stays whole: the GPT's 1536-wide MLP forward, 16384 x 1536 x 384.
  expect_plan(gemm_plan(hopper(false), 16384, 1536, 384, 1), 128, 128, 2, 1, 384);
}

TEST(GemmPlan, ALongKFillsOneWaveOfTwoWorkGroupsAUnit) {
  // The GPT's qkv weight gradient: 9 x 3 = 27 tiles, 264 slots: 9 parts of 1824.
  expect_plan(gemm_plan(hopper(false), 1152, 384, 16384, 1), 128, 128, 2, 9, 1824);
  // 2048^3 fills the wave already: K stays whole.
  expect_plan(gemm_plan(hopper(false), 2048, 2048, 4096, 1), 128, 128, 2, 1, 4096);
}

TEST(GemmPlan, CpuDriversAndUnknownUnitsKeepTheWholeK) {
  GpuTraits cpu = hopper(false);
  cpu.vendor_id = 0x10005;  // lavapipe's
  cpu.is_cpu = true;
  cpu.compute_units = 2;
  expect_plan(gemm_plan(cpu, 1024, 1024, 1024, 1), 64, 64, 1, 1, 1024);
  // Where the API does not say how many units there are, only a K of 2048 or more splits.
  GpuTraits unknown = hopper(false);
  unknown.compute_units = 0;
  EXPECT_EQ(gemm_plan(unknown, 128, 128, 1600, 1).parts, 1);
}
