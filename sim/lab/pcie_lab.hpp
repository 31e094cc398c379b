// stepcast pcie-lab: reproduces the measurements of one 8-GPU PCIe machine (data/pcie-lab)
// from the rtx-pro-6000-pcie-8x hardware profile and the workloads the lab describes:
// collective times by size and group, a DDP gradient-bucket sweep on GPT-2 124M (with and
// without no_sync under gradient accumulation), and a GPipe micro-batch sweep on a 4-stage
// stack of 4096x4096 linear layers. Every prediction comes from the cost model and the event
// engine; nothing is fitted per row. The report states each acceptance check and whether it
// holds.
#pragma once

#include <string>

namespace stepcast::lab {

struct LabResult {
  std::string markdown;
  int checks = 0;
  int passed = 0;
};

LabResult run_pcie_lab(const std::string& data_dir);

}  // namespace stepcast::lab
