// Compute costs: attention kernel throughput by head dimension (the profile's measured points,
// interpolated in log2 of the head dimension) and its validation.
#include "sim/cost/compute.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "sim/config/hardware.hpp"
#include "sim/core/json_reader.hpp"

namespace stepcast::cost {
namespace {

const std::vector<std::pair<double, double>> kFused = {{64, 0.732}, {128, 1.0}, {256, 1.076}};

TEST(AttentionHeadDim, FactorInterpolatesInLog2AndHoldsFlatBeyondTheEnds) {
  EXPECT_DOUBLE_EQ(head_dim_factor(kFused, 128), 1.0);
  EXPECT_DOUBLE_EQ(head_dim_factor(kFused, 64), 0.732);
  EXPECT_DOUBLE_EQ(head_dim_factor(kFused, 32), 0.732);
  EXPECT_DOUBLE_EQ(head_dim_factor(kFused, 512), 1.076);
  EXPECT_NEAR(head_dim_factor(kFused, 64.0 * std::sqrt(2.0)), 0.5 * (0.732 + 1.0), 1e-12);
  EXPECT_NEAR(head_dim_factor(kFused, 192), 1.0 + std::log2(1.5) * 0.076, 1e-12);
  EXPECT_DOUBLE_EQ(head_dim_factor({}, 64), 1.0);
}

// The same attention FLOPs take 1/0.732 as long at head dim 64 as at 128 on Hopper's fused
// kernels (FlashAttention-3 paper figures in the profile), 1/0.876 with FlashAttention-2; a
// profile without measured points (A100) does not depend on the head dimension.
TEST(AttentionHeadDim, HopperAttentionSlowsAtSmallHeads) {
  const hw::HardwareProfile h100 = hw::builtin_hardware("h100-sxm");
  // 32 heads of 128 against 64 heads of 64: the same FLOPs.
  const AttentionShape d128{1, 32, 16384, 16384, 128, 128, true}, d64{1, 64, 16384, 16384, 64, 64, true};
  ASSERT_DOUBLE_EQ(d128.forward_flops().value(), d64.forward_flops().value());
  auto ratio = [&](const hw::HardwareProfile& hw, bool flash2, bool backward) {
    const double o = hw.efficiency.kernel_overhead.value();
    return (flash_attention_time(d64, backward, hw, flash2).value() - o) / (flash_attention_time(d128, backward, hw, flash2).value() - o);
  };
  EXPECT_NEAR(ratio(h100, false, false), 1.0 / 0.732, 1e-9);
  EXPECT_NEAR(ratio(h100, false, true), 1.0 / 0.732, 1e-9);
  EXPECT_NEAR(ratio(h100, true, false), 1.0 / 0.876, 1e-9);
  EXPECT_NEAR(ratio(hw::builtin_hardware("a100-sxm-80gb"), false, false), 1.0, 1e-12);
}

TEST(AttentionHeadDim, BadPointsNameTheField) {
  for (const char* bad : {R"({"abc": 1.0})", R"({"64": -1})", R"({"4": 1.0})", R"([])"}) {
    core::Json j = hw::builtin_hardware_json("h100-sxm");
    j["efficiency"]["attention_head_dim_scale"] = core::Json::parse(bad);
    core::Issues issues;
    (void)hw::parse_hardware(j, "$.hardware", issues);
    ASSERT_FALSE(issues.empty()) << bad;
    std::string all;
    for (const auto& l : issues.lines()) all += l + "\n";
    EXPECT_NE(all.find("$.hardware.efficiency.attention_head_dim_scale"), std::string::npos) << all;
  }
}

}  // namespace
}  // namespace stepcast::cost
