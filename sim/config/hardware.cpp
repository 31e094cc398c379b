#include "sim/config/hardware.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <stdexcept>

#include "sim/core/embedded.hpp"
#include "sim/core/memo.hpp"

namespace stepcast::hw {

using core::Issues;
using core::Json;
using core::ObjectReader;

std::string to_string(Dtype d) {
  switch (d) {
    case Dtype::kFp32: return "fp32";
    case Dtype::kTf32: return "tf32";
    case Dtype::kBf16: return "bf16";
    case Dtype::kFp16: return "fp16";
    case Dtype::kFp8: return "fp8";
  }
  return "?";
}

Dtype dtype_from_string(const std::string& s) {
  if (s == "fp32") return Dtype::kFp32;
  if (s == "tf32") return Dtype::kTf32;
  if (s == "bf16") return Dtype::kBf16;
  if (s == "fp16") return Dtype::kFp16;
  if (s == "fp8") return Dtype::kFp8;
  throw std::invalid_argument("unknown dtype '" + s + "'; allowed: fp32, tf32, bf16, fp16, fp8");
}

double bytes_per_element(Dtype d) {
  switch (d) {
    case Dtype::kFp32:
    case Dtype::kTf32: return 4.0;
    case Dtype::kBf16:
    case Dtype::kFp16: return 2.0;
    case Dtype::kFp8: return 1.0;
  }
  return 2.0;
}

core::FlopRate HardwareProfile::peak_for(Dtype d) const {
  auto it = peak.find(d);
  if (it == peak.end()) {
    throw core::UserError("hardware '" + name + "' has no " + to_string(d) +
                          " peak rate (hardware.gpu.peak_flops." + to_string(d) + ")");
  }
  return it->second;
}

double HardwareProfile::gemm_shape_efficiency(Dtype d, double m, double n, double k) const {
  const double h = efficiency.gemm_half_dim;
  auto ramp = [h](double x) { return h <= 0.0 ? 1.0 : x / (x + h); };
  return gemm_max_for(d) * ramp(m) * ramp(n) * ramp(k);
}

double HardwareProfile::gemm_max_for(Dtype d) const {
  auto it = efficiency.gemm_max.find(d);
  if (it != efficiency.gemm_max.end()) return it->second;
  auto bf = efficiency.gemm_max.find(Dtype::kBf16);
  return bf != efficiency.gemm_max.end() ? bf->second : 0.7;
}

std::vector<FabricTier> pcie_tiers(const PcieTopology& t, int gpus_per_node) {
  std::vector<FabricTier> out;
  auto tier = [&](const char* name, int span, bool crosses_sockets, core::Duration hop) {
    FabricTier f;
    f.name = name;
    f.span = span;
    const double ring = t.ring_bandwidth.value();
    const double sock = t.socket_link.value();
    const double ag = crosses_sockets ? std::min(ring, sock) : ring;
    const double rs = crosses_sockets ? std::min(ring, sock * t.socket_reduce_efficiency) : ring;
    f.busbw = core::Bandwidth(ag);
    f.reduce_scatter_busbw = core::Bandwidth(rs);
    // An all-reduce is a reduce-scatter then an all-gather of equal bus volume.
    f.allreduce_busbw = core::Bandwidth(2.0 / (1.0 / rs + 1.0 / ag));
    f.broadcast_busbw = core::Bandwidth(crosses_sockets ? std::min(t.chain_bandwidth.value(), sock) : t.chain_bandwidth.value());
    f.p2p_bandwidth = t.gpu_link;
    f.base_latency = t.launch_latency;
    f.p2p_latency = t.p2p_latency;
    f.latency = hop;
    out.push_back(f);
  };
  if (t.gpus_per_switch > 1 && t.gpus_per_switch < t.gpus_per_socket) tier("pcie-switch", t.gpus_per_switch, false, t.switch_hop);
  if (t.gpus_per_socket < gpus_per_node) tier("socket", t.gpus_per_socket, false, t.socket_hop);
  tier(t.gpus_per_socket < gpus_per_node ? "socket-link" : "socket", gpus_per_node, t.gpus_per_socket < gpus_per_node,
       t.gpus_per_socket < gpus_per_node ? t.socket_link_hop : t.socket_hop);
  return out;
}

const FabricTier& HardwareProfile::tier_for_span(int lo, int hi) const {
  for (const auto& t : fabric) {
    if (lo / t.span == hi / t.span) return t;
  }
  return fabric.back();
}

core::Bandwidth HardwareProfile::nic_bandwidth_per_gpu(int64_t nodes) const {
  const double nics = static_cast<double>(std::max(1, network.nics_per_node));
  const bool above_leaf = network.nodes_per_leaf <= 0 ? nodes > 1 : nodes > network.nodes_per_leaf;
  const double over = above_leaf ? std::max(1.0, network.oversubscription) : 1.0;
  return core::Bandwidth(network.nic_bandwidth.value() * network.efficiency * nics / static_cast<double>(gpus_per_node) / over);
}

core::Bandwidth HardwareProfile::fabric_port_bandwidth(int64_t node_gpus) const {
  const auto& tier = tier_for_span(0, static_cast<int>(node_gpus) - 1);
  return core::Bandwidth(std::max({tier.busbw.value(), tier.allreduce_busbw.value(), tier.reduce_scatter_busbw.value(),
                                   tier.broadcast_busbw.value(), tier.p2p_bandwidth.value()}));
}

namespace {

const std::vector<std::string> kDtypes = {"fp32", "tf32", "bf16", "fp16", "fp8"};

// {"64": 0.73, "128": 1.0, ...}: attention throughput factors by head dimension, sorted.
std::vector<std::pair<double, double>> head_dim_scale(ObjectReader& r, const char* key) {
  std::vector<std::pair<double, double>> points;
  const Json* j = r.get_raw(key);
  if (j == nullptr) return points;
  const std::string path = r.child_path(key);
  if (!j->is_object() || j->empty()) {
    r.issues().add(path, "expected an object of head dimension -> factor, e.g. {\"64\": 0.73, \"128\": 1.0}");
    return points;
  }
  for (const auto& [k, v] : j->items()) {
    char* end = nullptr;
    const long d = std::strtol(k.c_str(), &end, 10);
    if (k.empty() || *end != '\0' || d < 8 || d > 1024) {
      r.issues().add(path + "." + k, "head dimension must be an integer in [8, 1024]");
      continue;
    }
    if (!v.is_number() || v.get<double>() < 0.01 || v.get<double>() > 10.0) {
      r.issues().add(path + "." + k, "got " + core::show(v) + "; expected a factor in [0.01, 10]");
      continue;
    }
    points.emplace_back(static_cast<double>(d), v.get<double>());
  }
  std::sort(points.begin(), points.end());
  return points;
}

// efficiency.gemm_measured: {dtype: [[m, n, k, efficiency], ...]}; each point's ratio to the
// shape model (gemm_max and the half-dimension are parsed before it) is kept in log form.
void parse_gemm_measured(ObjectReader& r, HardwareProfile& hw) {
  const Json* j = r.get_raw("gemm_measured");
  if (j == nullptr) return;
  const std::string path = r.child_path("gemm_measured");
  if (!j->is_object()) {
    r.issues().add(path, "expected an object of dtype -> [[m, n, k, efficiency], ...]");
    return;
  }
  for (const auto& [name, list] : j->items()) {
    const std::string p = path + "." + name;
    const auto d = std::find(kDtypes.begin(), kDtypes.end(), name);
    if (d == kDtypes.end()) {
      r.issues().add(p, "unknown dtype; expected one of bf16, fp16, fp8, tf32, fp32");
      continue;
    }
    const Dtype dtype = dtype_from_string(name);
    if (!hw.has_dtype(dtype)) r.issues().add(p, "dtype has no gpu.peak_flops entry to measure against");
    if (!list.is_array()) {
      r.issues().add(p, "expected an array of [m, n, k, efficiency]");
      continue;
    }
    std::vector<Efficiency::GemmPoint> pts;
    for (size_t i = 0; i < list.size(); ++i) {
      const Json& e = list[i];
      const std::string ep = p + "[" + std::to_string(i) + "]";
      bool ok = e.is_array() && e.size() == 4;
      for (size_t c = 0; ok && c < 4; ++c) ok = e[c].is_number() && e[c].get<double>() > 0 && std::isfinite(e[c].get<double>());
      if (!ok || e[3].get<double>() > 1.5) {
        r.issues().add(ep, "got " + core::show(e) + "; expected [m, n, k, efficiency] with positive dimensions and an efficiency in (0, 1.5]");
        continue;
      }
      const double m = e[0].get<double>(), n = e[1].get<double>(), k = e[2].get<double>();
      if (std::floor(m) != m || std::floor(n) != n || std::floor(k) != k) {
        r.issues().add(ep, "got " + core::show(e) + "; GEMM dimensions are integers");
        continue;
      }
      bool repeated = false;
      for (const auto& q : pts) repeated = repeated || (q.lm == std::log2(m) && q.ln == std::log2(n) && q.lk == std::log2(k));
      if (repeated) {
        r.issues().add(ep, "repeats the shape " + core::show(Json::array({e[0], e[1], e[2]})) + "; give each measured shape once");
        continue;
      }
      pts.push_back({std::log2(m), std::log2(n), std::log2(k), std::log(e[3].get<double>() / hw.gemm_shape_efficiency(dtype, m, n, k))});
    }
    hw.efficiency.gemm_measured[dtype] = std::move(pts);
  }
}

HardwareProfile parse_profile_object(const Json& j, const std::string& path, Issues& issues) {
  HardwareProfile hw;
  ObjectReader r(j, path, issues);
  hw.name = r.get_string("name").value_or("custom");
  hw.description = r.get_string("description").value_or("");
  if (const Json* src = r.get_raw("sources"); src != nullptr) {
    if (!src->is_array()) {
      issues.add(r.child_path("sources"), "expected an array of citation strings");
    } else {
      for (const auto& s : *src) hw.sources.push_back(s.is_string() ? s.get<std::string>() : s.dump());
    }
  }
  r.ignore({"notes"});

  // --- gpu ---
  if (const Json* g = r.get_raw("gpu"); g != nullptr) {
    ObjectReader gr(*g, r.child_path("gpu"), issues);
    hw.gpu_name = gr.get_string("name").value_or(hw.name);
    if (const Json* pf = gr.get_raw("peak_flops"); pf != nullptr) {
      ObjectReader pr(*pf, gr.child_path("peak_flops"), issues);
      for (const auto& d : kDtypes) {
        auto v = pr.get_flop_rate(d);
        // A bare number is FLOP/s: 989 means 989 FLOP/s, not 989 TFLOP/s, which no GPU is.
        if (v && (v->value() < 1e9 || v->value() > 1e18)) {
          issues.add(pr.child_path(d), "got " + core::fmt("%g", v->value()) + " FLOP/s; expected 1 GFLOP/s to 1 EFLOP/s (a bare number is FLOP/s: write \"989TFLOPS\")");
          v.reset();
        }
        if (v) hw.peak[dtype_from_string(d)] = *v;
      }
      pr.finish();
    }
    if (hw.peak.count(Dtype::kBf16) == 0 && hw.peak.count(Dtype::kFp16) == 0) {
      issues.add(gr.child_path("peak_flops"), "needs at least a bf16 or fp16 dense peak rate");
    }
    const auto capacity = gr.get_bytes("memory");
    hw.hbm_capacity = capacity.value_or(core::Bytes(0));
    if (!gr.has("memory")) issues.add(gr.child_path("memory"), "required (e.g. \"80GB\")");
    if (capacity && (hw.hbm_capacity.value() < 64.0 * 1048576.0 || hw.hbm_capacity.value() > 1.2e15)) {
      issues.add(gr.child_path("memory"), "got " + core::fmt("%g", hw.hbm_capacity.value()) +
                                              " bytes; expected 64 MiB to a petabyte per GPU (a bare number is bytes: write \"80GB\")");
    }
    const auto bandwidth = gr.get_bandwidth("memory_bandwidth");
    hw.hbm_bandwidth = bandwidth.value_or(core::Bandwidth(1));
    if (bandwidth && (hw.hbm_bandwidth.value() < 1e6 || hw.hbm_bandwidth.value() > 1e15)) {
      issues.add(gr.child_path("memory_bandwidth"), "got " + core::fmt("%g", hw.hbm_bandwidth.value()) +
                                                        " B/s; expected 1 MB/s to 1 PB/s (a bare number is bytes/s: write \"3.35TB/s\")");
    }
    if (!gr.has("memory_bandwidth")) {
      issues.add(gr.child_path("memory_bandwidth"), "required (e.g. \"3.35TB/s\")");
    }
    hw.runtime_reserved = gr.get_bytes("runtime_reserved", false).value_or(core::Bytes(0));
    hw.nccl_comm_memory = gr.get_bytes("nccl_comm_memory", false).value_or(core::Bytes(0));
    hw.nccl_pair_memory = gr.get_bytes("nccl_pair_memory", false).value_or(hw.nccl_comm_memory);
    hw.nccl_alltoall_peer_memory = gr.get_bytes("nccl_alltoall_peer_memory", false).value_or(core::Bytes(0));
    hw.sm_count = static_cast<int>(gr.get_int("sm_count", 1, 100000, 100));
    hw.tdp_watts = gr.has("tdp_watts") ? gr.get_number("tdp_watts", 1, 100000, 0) : 0.0;
    gr.finish();
  } else {
    issues.add(r.child_path("gpu"), "required object with peak_flops, memory, memory_bandwidth");
  }

  // --- efficiency ---
  bool gemm_max_named = false;  // a bad gemm_max entry was reported at its own path
  if (const Json* e = r.get_raw("efficiency"); e != nullptr) {
    ObjectReader er(*e, r.child_path("efficiency"), issues);
    if (const Json* gm = er.get_raw("gemm_max"); gm != nullptr) {
      const size_t before = issues.size();
      ObjectReader gr(*gm, er.child_path("gemm_max"), issues);
      for (const auto& d : kDtypes) {
        if (auto v = gr.get_number(d, 0.01, 1.0)) hw.efficiency.gemm_max[dtype_from_string(d)] = *v;
      }
      gr.finish();
      gemm_max_named = issues.size() > before;
    }
    hw.efficiency.gemm_half_dim = er.get_number("gemm_half_dim", 0.0, 16384.0, 128.0);
    hw.efficiency.sustained_clock = er.get_number("sustained_clock", 0.05, 1.0, 1.0);
    hw.efficiency.tp_overlap_sms = er.get_number("tp_overlap_sms", 0.0, 1024.0, 16.0);
    hw.efficiency.collective_sms = er.get_number("collective_sms", 0.0, 1024.0, 0.0);
    if (hw.efficiency.collective_sms > hw.sm_count) {
      issues.add(er.child_path("collective_sms"), "got " + core::fmt("%g", hw.efficiency.collective_sms) + "; the GPU has " +
                                                    std::to_string(hw.sm_count) + " SMs (gpu.sm_count)");
    }
    if (er.has("tp_overlap_sms") && hw.efficiency.tp_overlap_sms > hw.sm_count) {
      issues.add(er.child_path("tp_overlap_sms"), "got " + core::fmt("%g", hw.efficiency.tp_overlap_sms) + "; the GPU has " +
                                                    std::to_string(hw.sm_count) + " SMs (gpu.sm_count)");
    }
    hw.efficiency.attention_fwd = er.get_number("attention_fwd", 0.01, 1.0, 0.5);
    hw.efficiency.attention_bwd = er.get_number("attention_bwd", 0.01, 1.0, 0.4);
    hw.efficiency.attention_flash2_fwd = er.get_number("attention_flash2_fwd", 0.01, 1.0, hw.efficiency.attention_fwd);
    hw.efficiency.attention_flash2_bwd = er.get_number("attention_flash2_bwd", 0.01, 1.0, hw.efficiency.attention_bwd);
    hw.efficiency.attention_tile = er.get_number("attention_tile", 0.0, 1024.0, 128.0);
    hw.efficiency.attention_flash2_tile = er.get_number("attention_flash2_tile", 0.0, 1024.0, 64.0);
    hw.efficiency.attention_triton_fwd = er.has("attention_triton_fwd") ? er.get_number("attention_triton_fwd", 0.01, 1.0, 0.0) : 0.0;
    hw.efficiency.attention_triton_bwd = er.has("attention_triton_bwd") ? er.get_number("attention_triton_bwd", 0.01, 1.0, 0.0) : 0.0;
    if ((hw.efficiency.attention_triton_fwd > 0) != (hw.efficiency.attention_triton_bwd > 0)) {
      issues.add(er.child_path(hw.efficiency.attention_triton_fwd > 0 ? "attention_triton_bwd" : "attention_triton_fwd"),
                 "missing; the Triton attention kernel's forward and backward efficiencies come together");
    }
    hw.efficiency.attention_triton_tile = er.get_number("attention_triton_tile", 0.0, 1024.0, 128.0);
    hw.efficiency.attention_head_dim_scale = head_dim_scale(er, "attention_head_dim_scale");
    hw.efficiency.attention_flash2_head_dim_scale = head_dim_scale(er, "attention_flash2_head_dim_scale");
    parse_gemm_measured(er, hw);
    hw.efficiency.memory_bound = er.get_number("memory_bound", 0.01, 1.0, 0.8);
    hw.efficiency.optimizer_rate = er.get_number("optimizer_rate", 0.0, 1e15, 0.0);
    if (hw.efficiency.optimizer_rate > 0 && hw.efficiency.optimizer_rate < 1e6) {
      issues.add(er.child_path("optimizer_rate"), "got " + core::fmt("%g", hw.efficiency.optimizer_rate) +
                                                      " parameters per second; no processor updates fewer than 1e6 a second "
                                                      "(0 or omitted: the optimizer is costed from memory bandwidth)");
      hw.efficiency.optimizer_rate = 0;
    }
    hw.efficiency.kernel_overhead =
        er.get_duration("kernel_overhead", false, 0.1).value_or(core::micros(3.0));
    er.finish();
  }
  // The GEMM ceiling is not defaulted: missing, or an empty object, is one problem (a bad entry
  // has already been named at its own path).
  if (hw.efficiency.gemm_max.empty() && !gemm_max_named) {
    issues.add(r.child_path("efficiency") + ".gemm_max",
               "required: the best fraction of peak large GEMMs reach per dtype, e.g. {\"bf16\": 0.8} (calibrate measures it)");
  }

  // --- node ---
  if (const Json* n = r.get_raw("node"); n != nullptr) {
    ObjectReader nr(*n, r.child_path("node"), issues);
    hw.gpus_per_node = static_cast<int>(nr.get_int("gpus_per_node", 1, 1024, 8));
    if (const Json* tj = nr.get_raw("topology"); tj != nullptr) {
      if (nr.has("fabric")) issues.add(nr.child_path("fabric"), "give either fabric tiers or a topology, not both");
      ObjectReader tr(*tj, nr.child_path("topology"), issues);
      auto& t = hw.topology;
      (void)tr.get_choice("kind", {"pcie"}, "pcie");
      t.gpus_per_switch = static_cast<int>(tr.get_int("gpus_per_switch", 1, 1024, 2));
      t.gpus_per_socket = static_cast<int>(tr.get_int("gpus_per_socket", 1, 1024, hw.gpus_per_node / 2));
      auto need_bw = [&](const char* key) {
        auto v = tr.get_bandwidth(key);
        if (!v && !tr.has(key)) issues.add(tr.child_path(key), "required bandwidth (e.g. \"46GB/s\")");
        return v.value_or(core::gb_per_s(1));
      };
      t.gpu_link = need_bw("gpu_link");
      t.ring_bandwidth = need_bw("ring_bandwidth");
      t.socket_link = need_bw("socket_link");
      t.chain_bandwidth = tr.get_bandwidth("chain_bandwidth").value_or(t.ring_bandwidth);
      t.socket_reduce_efficiency = tr.get_number("socket_reduce_efficiency", 0.01, 1.0, 1.0);
      t.launch_latency = tr.get_duration("launch_latency", false, 0.1).value_or(core::Duration(0));
      t.p2p_latency = tr.get_duration("p2p_latency", false, 0.1);
      t.switch_hop = tr.get_duration("switch_hop", false, 0.1).value_or(core::micros(1));
      t.socket_hop = tr.get_duration("socket_hop", false, 0.1).value_or(t.switch_hop);
      t.socket_link_hop = tr.get_duration("socket_link_hop", false, 0.1).value_or(t.socket_hop);
      if (t.gpus_per_socket % t.gpus_per_switch != 0 || hw.gpus_per_node % t.gpus_per_socket != 0) {
        issues.add(tr.child_path("gpus_per_socket"), "switches must nest in sockets and sockets in the node (" +
                                                         std::to_string(t.gpus_per_switch) + " | " +
                                                         std::to_string(t.gpus_per_socket) + " | " +
                                                         std::to_string(hw.gpus_per_node) + ")");
      } else {
        hw.fabric = pcie_tiers(t, hw.gpus_per_node);
        hw.has_topology = true;
      }
      tr.finish();
    } else if (const Json* tiers = nr.get_raw("fabric"); tiers != nullptr && tiers->is_array() && !tiers->empty()) {
      for (size_t i = 0; i < tiers->size(); ++i) {
        ObjectReader tr((*tiers)[i], nr.child_path("fabric") + "[" + std::to_string(i) + "]", issues);
        FabricTier t;
        t.name = tr.get_string("name").value_or("tier" + std::to_string(i));
        t.span = static_cast<int>(tr.get_int("span", 1, 1024, hw.gpus_per_node));
        t.busbw = tr.get_bandwidth("busbw").value_or(core::gb_per_s(1));
        if (!tr.has("busbw")) issues.add(tr.child_path("busbw"), "required (e.g. \"370GB/s\")");
        t.allreduce_busbw = tr.get_bandwidth("allreduce_busbw").value_or(t.busbw);
        t.reduce_scatter_busbw = tr.get_bandwidth("reduce_scatter_busbw").value_or(t.busbw);
        t.broadcast_busbw = tr.get_bandwidth("broadcast_busbw").value_or(t.busbw);
        t.p2p_bandwidth = tr.get_bandwidth("p2p_bandwidth").value_or(t.busbw);
        t.latency = tr.get_duration("latency", false, 0.1).value_or(core::micros(5));
        t.base_latency = tr.get_duration("base_latency", false, 0.1).value_or(core::Duration(0));
        t.p2p_latency = tr.get_duration("p2p_latency", false, 0.1);
        t.full_mesh = tr.get_bool("full_mesh", false);
        if (const Json* curve = tr.get_raw("size_curve"); curve != nullptr) {
          bool ok = curve->is_array() && !curve->empty();
          double last = 0.0;
          for (const auto& pt : ok ? *curve : Json::array()) {
            if (!pt.is_array() || pt.size() != 2 || !pt[0].is_number() || !pt[1].is_number() ||
                pt[0].get<double>() <= last || pt[1].get<double>() <= 0.0 || pt[1].get<double>() > 1.0) {
              ok = false;
              break;
            }
            last = pt[0].get<double>();
            t.size_curve.emplace_back(pt[0].get<double>(), pt[1].get<double>());
          }
          if (!ok) {
            issues.add(tr.child_path("size_curve"),
                       "expected [[bytes, fraction], ...] with ascending sizes and fractions in (0, 1]");
          }
        }
        if (const Json* oc = tr.get_raw("size_curves"); oc != nullptr) {
          const std::vector<std::string> ops{"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv"};
          if (!oc->is_object()) {
            issues.add(tr.child_path("size_curves"), "expected an object of per-operation curves");
          } else {
            for (const auto& [op, curve] : oc->items()) {
              const std::string cpath = tr.child_path("size_curves") + "." + op;
              if (std::find(ops.begin(), ops.end(), op) == ops.end()) {
                issues.add(cpath, "unknown operation; allowed: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send_recv");
                continue;
              }
              bool ok = curve.is_array() && !curve.empty();
              double last = 0.0;
              std::vector<std::pair<double, double>> pts;
              for (const auto& pt : ok ? curve : Json::array()) {
                if (!pt.is_array() || pt.size() != 2 || !pt[0].is_number() || !pt[1].is_number() || pt[0].get<double>() <= last ||
                    pt[1].get<double>() <= 0.0) {
                  ok = false;
                  break;
                }
                last = pt[0].get<double>();
                pts.emplace_back(pt[0].get<double>(), pt[1].get<double>());
              }
              if (!ok) {
                issues.add(cpath, "expected [[bytes, bus bandwidth in bytes/s], ...] with ascending sizes and positive bandwidths");
              } else {
                t.op_curves[op] = pts;
              }
            }
          }
        }
        if (hw.gpus_per_node % t.span != 0) {
          issues.add(tr.child_path("span"), "got " + std::to_string(t.span) +
                                                "; must divide gpus_per_node (" +
                                                std::to_string(hw.gpus_per_node) + ")");
        }
        tr.finish();
        hw.fabric.push_back(t);
      }
      for (size_t i = 1; i < hw.fabric.size(); ++i) {
        if (hw.fabric[i].span <= hw.fabric[i - 1].span || hw.fabric[i].span % hw.fabric[i - 1].span != 0) {
          issues.add(nr.child_path("fabric"), "tiers must be nested: each span a multiple of the previous");
        }
      }
      if (!hw.fabric.empty() && hw.fabric.back().span != hw.gpus_per_node) {
        issues.add(nr.child_path("fabric"), "the widest tier must span the whole node (" +
                                                std::to_string(hw.gpus_per_node) + " GPUs)");
      }
    } else {
      issues.add(nr.child_path("fabric"), "required non-empty array of fabric tiers");
    }
    nr.finish();
  } else {
    issues.add(r.child_path("node"), "required object with gpus_per_node and fabric");
  }

  // --- host (optional: CPU offload) ---
  if (const Json* h = r.get_raw("host"); h != nullptr) {
    ObjectReader hr(*h, r.child_path("host"), issues);
    auto& host = hw.host;
    host.stated = true;
    auto required = [&](const char* key, const char* example) {
      if (!hr.has(key)) issues.add(hr.child_path(key), std::string("required with host (e.g. \"") + example + "\")");
    };
    required("memory", "2TiB");
    required("memory_bandwidth", "614GB/s");
    required("link", "44GB/s");
    host.memory = hr.get_bytes("memory").value_or(core::Bytes(0));
    host.memory_bandwidth = hr.get_bandwidth("memory_bandwidth").value_or(core::Bandwidth(1));
    host.link = hr.get_bandwidth("link").value_or(core::Bandwidth(1));
    host.memory_efficiency = hr.get_number("memory_efficiency", 0.01, 1.0, 0.8);
    host.optimizer_rate = hr.get_number("optimizer_rate", 0.0, 1e15, 0.0);
    if (host.optimizer_rate > 0 && host.optimizer_rate < 1e6) {
      issues.add(hr.child_path("optimizer_rate"), "got " + core::fmt("%g", host.optimizer_rate) +
                                                      " parameters per second; no host updates fewer than 1e6 a second "
                                                      "(0 or omitted: the CPU optimizer is costed from host memory bandwidth)");
    }
    hr.finish();
  }

  // --- calibration: what a measured profile records about its own measurement ---
  if (const Json* c = r.get_raw("calibration"); c != nullptr) {
    ObjectReader cr(*c, r.child_path("calibration"), issues);
    if (const Json* g = cr.get_raw("reference_gemm"); g != nullptr) {
      ObjectReader gr(*g, cr.child_path("reference_gemm"), issues);
      auto& ref = hw.calibration_reference;
      for (const char* key : {"m", "n", "k", "dtype", "seconds"}) {
        if (!gr.has(key)) issues.add(gr.child_path(key), "required with reference_gemm");
      }
      ref.m = static_cast<double>(gr.get_int("m", 1, 1 << 20, 0));
      ref.n = static_cast<double>(gr.get_int("n", 1, 1 << 20, 0));
      ref.k = static_cast<double>(gr.get_int("k", 1, 1 << 20, 0));
      if (const auto d = gr.get_string("dtype"); d) {
        if (std::find(kDtypes.begin(), kDtypes.end(), *d) == kDtypes.end()) {
          issues.add(gr.child_path("dtype"), "got \"" + *d + "\"; expected one of bf16, fp16, fp8, tf32, fp32");
        } else {
          ref.dtype = dtype_from_string(*d);
        }
      }
      ref.seconds = gr.get_number("seconds", 1e-9, 3600.0, 0.0);
      gr.ignore({"samples_s"});
      gr.finish();
    }
    cr.finish();
  }

  // --- network ---
  if (const Json* n = r.get_raw("network"); n != nullptr) {
    ObjectReader nr(*n, r.child_path("network"), issues);
    hw.network.name = nr.get_string("name").value_or("network");
    hw.network.stated = true;
    const auto nic = nr.get_bandwidth("nic_bandwidth");
    if (!nic && !nr.has("nic_bandwidth")) issues.add(nr.child_path("nic_bandwidth"), "required: the line rate of one NIC, e.g. \"400Gb/s\"");
    hw.network.nic_bandwidth = nic.value_or(core::gb_per_s(25));
    hw.network.nics_per_node = static_cast<int>(nr.get_int("nics_per_node", 1, 1024, hw.gpus_per_node));
    hw.network.efficiency = nr.get_number("efficiency", 0.01, 1.0, 0.9);
    hw.network.latency = nr.get_duration("latency", false, 0.1).value_or(core::micros(10));
    hw.network.oversubscription = nr.get_number("oversubscription", 1.0, 64.0, 1.0);
    hw.network.nodes_per_leaf = nr.get_int("nodes_per_leaf", 0, 1000000, 0);
    nr.finish();
  } else {
    hw.network.nic_bandwidth = core::gb_per_s(25);
    hw.network.nics_per_node = hw.gpus_per_node;
  }
  r.finish();
  return hw;
}

// RFC 7386 merge of overrides into a base profile.
Json merge_patch(Json base, const Json& patch) {
  base.merge_patch(patch);
  return base;
}

}  // namespace

Json builtin_hardware_json(const std::string& name) {
  for (const auto& e : embedded::hardware_profiles()) {
    if (e.name == name) return core::parse_json_text(std::string(e.text), "hardware:" + name);
  }
  std::string list;
  for (const auto& n : builtin_hardware_names()) list += (list.empty() ? "" : ", ") + n;
  if (name.find('/') != std::string::npos || std::filesystem::path(name).extension() == ".json") {
    throw core::UserError("unknown hardware '" + name + "': not a built-in name, and no such profile file; built-in profiles: " + list);
  }
  throw core::UserError("unknown hardware '" + name + "'" + core::did_you_mean(name, builtin_hardware_names()) + "; built-in profiles: " + list);
}

HardwareProfile builtin_hardware(const std::string& name) {
  static core::OncePerName<HardwareProfile> parsed;
  return parsed.get(name, [&] {
    Issues issues;
    HardwareProfile hw = parse_profile_object(builtin_hardware_json(name), "hardware:" + name, issues);
    issues.throw_if_any();
    return hw;
  });
}

std::vector<std::string> builtin_hardware_names() {
  std::vector<std::string> out;
  for (const auto& e : embedded::hardware_profiles()) out.emplace_back(e.name);
  std::sort(out.begin(), out.end());
  return out;
}

HardwareProfile parse_hardware(const Json& j, const std::string& path, Issues& issues, const std::string& base_dir) {
  if (j.is_string()) {
    try {
      return builtin_hardware(j.get<std::string>());
    } catch (const core::UserError& e) {
      issues.add(path, e.what());
      return {};
    }
  }
  if (!j.is_object()) {
    issues.add(path, "got " + core::show(j) + "; expected a profile name or a profile object");
    return {};
  }
  if (j.contains("path")) {
    if (!j["path"].is_string()) {
      issues.add(path + ".path", "got " + core::show(j["path"]) + "; expected a profile file path string");
      return {};
    }
    if (j.size() != 1) {
      issues.add(path, "a {\"path\": ...} profile takes no other keys (got " + core::other_keys(j, "path") +
                           "; to change a built-in profile use {\"base\": NAME, ...})");
      return {};
    }
    const std::string given = j["path"].get<std::string>();
    const std::string file = base_dir.empty() || (!given.empty() && given[0] == '/') ? given : base_dir + "/" + given;
    Json loaded;
    try {
      loaded = core::load_json_file(file);
    } catch (const core::UserError& e) {
      issues.add(path + ".path", e.what());
      return {};
    }
    // A file holds a whole profile or a built-in one changed ({"base": NAME, ...}), not another
    // {"path": ...}.
    if (loaded.is_object() && loaded.contains("path")) {
      issues.add(path + ".path", file + ": a profile file holds a profile (or {\"base\": NAME, ...}), not another {\"path\": ...}");
      return {};
    }
    return loaded.is_object() && loaded.contains("base") ? parse_hardware(loaded, path, issues) : parse_profile_object(loaded, path, issues);
  }
  if (j.contains("base")) {
    if (!j["base"].is_string()) {
      issues.add(path + ".base", "got " + core::show(j["base"]) + "; expected a built-in profile name");
      return {};
    }
    Json base;
    try {
      base = builtin_hardware_json(j["base"].get<std::string>());
    } catch (const core::UserError& e) {
      issues.add(path + ".base", e.what());
      return {};
    }
    Json patch = j;
    patch.erase("base");
    // A merge patch deletes a key given as null; an override that is null is a mistake here
    // (null is not a value in stepcast's own sections), not a request to fall back to defaults.
    const std::function<bool(const Json&, const std::string&)> no_nulls = [&](const Json& v, const std::string& at) {
      bool ok = true;
      if (v.is_null()) {
        issues.add(at, "got null; give a value or omit the key to keep the base profile's");
        return false;
      }
      if (v.is_object()) {
        for (const auto& [k, x] : v.items()) ok = no_nulls(x, at + "." + k) && ok;
      }
      return ok;
    };
    if (!no_nulls(patch, path)) return {};
    // The node is described by fabric tiers or by a PCIe topology: an override giving one
    // replaces the base's other.
    if (patch.contains("node") && patch["node"].is_object() && base.contains("node")) {
      if (patch["node"].contains("topology")) base["node"].erase("fabric");
      if (patch["node"].contains("fabric")) base["node"].erase("topology");
    }
    return parse_profile_object(merge_patch(base, patch), path, issues);
  }
  return parse_profile_object(j, path, issues);
}

}  // namespace stepcast::hw
