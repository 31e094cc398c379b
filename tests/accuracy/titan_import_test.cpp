// `stepcast import torchtitan`: the TOML subset torchtitan's job configs use, and a config
// converted through the accuracy harness's torchtitan mapping into a run file that loads.
#include "sim/accuracy/titan_import.hpp"

#include <gtest/gtest.h>

#include <string>

#include "sim/config/run_config.hpp"
#include "sim/core/error.hpp"
#include "sim/core/json_reader.hpp"

namespace stepcast::accuracy {
namespace {

using core::Json;

std::string launch_file(const std::string& name) {
  return core::load_text_file(std::string(STEPCAST_TEST_DATA_DIR) + "/../../configs/launch/" + name);
}

TEST(Toml, TheSubsetTrainingConfigsUse) {
  const Json d = config::parse_toml(R"(# a comment
top = 1
[a]
s = "x # not a comment"
t = 'y'
n = -3
big = 1_000_000
f = 2.5e-4
yes = true
arr = ["p", "q"]   # trailing comment
multi = [
  1,
  2,
]
[a.b]
deep = false
)",
                                    "t.toml");
  EXPECT_EQ(d["top"], 1);
  EXPECT_EQ(d["a"]["s"], "x # not a comment");
  EXPECT_EQ(d["a"]["t"], "y");
  EXPECT_EQ(d["a"]["n"], -3);
  EXPECT_EQ(d["a"]["big"], 1000000);
  EXPECT_DOUBLE_EQ(d["a"]["f"].get<double>(), 2.5e-4);
  EXPECT_EQ(d["a"]["yes"], true);
  EXPECT_EQ(d["a"]["arr"], Json::array({"p", "q"}));
  EXPECT_EQ(d["a"]["multi"], Json::array({1, 2}));
  EXPECT_EQ(d["a"]["b"]["deep"], false);
  for (const char* bad : {"[a\nx = 1", "x = \"open", "x", "x = [1, 2", "x = what", "[[arr]]"}) {
    try {
      (void)config::parse_toml(bad, "bad.toml");
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const core::UserError& e) {
      EXPECT_NE(std::string(e.what()).find("bad.toml:"), std::string::npos) << e.what();
    }
  }
}

TEST(TorchtitanImport, Llama8bThroughTheHarnessMapping) {
  config::ImportOptions o{.gpus = 8};
  const Json run = import_torchtitan(config::parse_toml(launch_file("torchtitan-llama3-8b.toml"), "t.toml"), "t.toml", o);
  const config::RunConfig rc = config::parse_run(run, "<import>", "");
  EXPECT_EQ(run["model"], "llama3.1-8b");
  EXPECT_EQ(run["hardware"], "h100-sxm");
  EXPECT_FALSE(run.contains("measured"));
  EXPECT_TRUE(rc.parallel.fsdp);
  EXPECT_EQ(rc.parallel.dp, 8);  // data_parallel_shard_degree -1: every GPU
  EXPECT_EQ(rc.training.global_batch_size, 8);
  EXPECT_EQ(rc.parallel.recompute, config::Recompute::kSelectiveOp);
  EXPECT_EQ(rc.training.loss, config::LossImpl::kEager);  // compile.enable false
  for (const auto& a : run["assumptions"]) EXPECT_NE(a.get<std::string>().rfind("hardware:", 0), 0u) << a;
  EXPECT_NE(run["notes"].get<std::string>().find("optimizer.lr"), std::string::npos);
  EXPECT_EQ(run["notes"].get<std::string>().find("parallelism."), std::string::npos);
}

TEST(TorchtitanImport, PipelineTensorParallelAndBadValues) {
  config::ImportOptions o{.gpus = 64};
  const Json cfg = config::parse_toml(R"([model]
name = "llama3"
flavor = "70B"
[training]
local_batch_size = 8
seq_len = 8192
[parallelism]
tensor_parallel_degree = 8
pipeline_parallel_degree = 2
pipeline_parallel_schedule = "Interleaved1F1B"
enable_async_tensor_parallel = true
[activation_checkpoint]
mode = "full"
[compile]
enable = true
)",
                                      "t.toml");
  const config::RunConfig rc = config::parse_run(import_torchtitan(cfg, "t.toml", o), "<import>", "");
  EXPECT_EQ(rc.parallel.tp, 8);
  EXPECT_EQ(rc.parallel.pp, 2);
  EXPECT_EQ(rc.parallel.dp, 4);
  EXPECT_EQ(rc.parallel.schedule, config::Schedule::kInterleaved);
  EXPECT_TRUE(rc.parallel.tp_comm_overlap);  // async TP
  EXPECT_FALSE(rc.parallel.tp_overlap_input_grad);  // ... without the input-gradient reduce-scatters
  EXPECT_EQ(rc.parallel.recompute, config::Recompute::kFull);
  EXPECT_TRUE(rc.parallel.recompute_stops_early);  // non-reentrant checkpoint
  EXPECT_EQ(rc.training.global_batch_size, 32);  // local 8 x dp 4

  // torch.distributed.pipelining's ZB-V: two stages per rank in a V.
  Json zbv_cfg = cfg;
  zbv_cfg["parallelism"]["pipeline_parallel_schedule"] = "ZBVZeroBubble";
  const config::RunConfig zbv = config::parse_run(import_torchtitan(zbv_cfg, "t.toml", o), "<import>", "");
  EXPECT_EQ(zbv.parallel.schedule, config::Schedule::kZbV);
  EXPECT_EQ(zbv.parallel.vpp, 2);
  EXPECT_EQ(zbv.parallel.head_stage(), 0);
  zbv_cfg["parallelism"]["pipeline_parallel_schedule"] = "DualPipeV";
  EXPECT_EQ(config::parse_run(import_torchtitan(zbv_cfg, "t.toml", o), "<import>", "").parallel.schedule, config::Schedule::kDualPipeV);

  auto err = [&](const std::string& text, config::ImportOptions opt) {
    try {
      (void)import_torchtitan(config::parse_toml(text, "t.toml"), "t.toml", opt);
    } catch (const core::UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string base = "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[training]\nlocal_batch_size = 1\nseq_len = 4096\n";
  EXPECT_NE(err(base + "[parallelism]\ntensor_parallel_degree = 3\n", o).find("does not divide"), std::string::npos);
  EXPECT_NE(err(base + "[activation_checkpoint]\nmode = \"most\"\n", o).find("activation_checkpoint.mode"), std::string::npos);
  EXPECT_NE(err(base + "[parallelism]\ntensor_parallel_degree = \"two\"\n", o).find("parallelism.tensor_parallel_degree"), std::string::npos);
  EXPECT_NE(err("[model]\nname = \"llama4\"\nflavor = \"17bx16e\"\n[training]\nlocal_batch_size = 1\nseq_len = 4096\n", o).find("--model"),
            std::string::npos);
  config::ImportOptions none;
  EXPECT_NE(err(base, none).find("--gpus"), std::string::npos);
  // The keys `stepcast export torchtitan` writes, malformed.
  const std::string pp2 = base + "[parallelism]\npipeline_parallel_degree = 2\n";
  EXPECT_NE(err(pp2 + "module_fqns_per_model_part = [[\"layers.0\"], [\"layers.1\"], [\"layers.2\"]]\n", o).find("a multiple of pipeline_parallel_degree 2"),
            std::string::npos);
  EXPECT_NE(err(pp2 + "module_fqns_per_model_part = [[\"layers.0\"], [3]]\n", o).find("expected module names"), std::string::npos);
  EXPECT_NE(err(pp2 + "context_parallel_rotate_method = \"ring\"\n", o).find("context_parallel_rotate_method"), std::string::npos);
  EXPECT_NE(err(pp2 + "fsdp_reshard_after_forward = \"sometimes\"\n", o).find("fsdp_reshard_after_forward"), std::string::npos);
}

}  // namespace
}  // namespace stepcast::accuracy
