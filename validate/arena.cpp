#include "validate/executor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace stepcast::validate {

namespace {

std::string gib(double b) {
  char s[64];
  std::snprintf(s, sizeof s, "%.3f GiB", b / 1073741824.0);
  return s;
}

}  // namespace

Arena::Arena(double capacity, int64_t rank, RawAlloc alloc, RawFree release)
    : capacity_(capacity), rank_(rank), raw_alloc_(std::move(alloc)), raw_free_(std::move(release)) {}

Arena::~Arena() {
  for (auto& b : blocks_) {
    if (b.second) raw_free_(b.second);
  }
  for (auto& c : cache_) raw_free_(c.second);
}

void* Arena::alloc(int32_t id, double bytes_d) {
  const auto bytes = static_cast<size_t>(std::max(64.0, std::ceil(bytes_d)));
  if (live_ + static_cast<double>(bytes) > capacity_) {
    throw DoesNotFit(std::string("does not fit: rank ") + std::to_string(rank_) + " needed " + gib(live_ + static_cast<double>(bytes)) +
                     " at its peak so far, the device has " + gib(capacity_));
  }
  void* block = nullptr;
  auto it = cache_.find(bytes);
  if (it != cache_.end()) {
    block = it->second;
    cache_.erase(it);
  } else {
    block = raw_alloc_(bytes);
    if (block == nullptr) {
      throw DoesNotFit(std::string("does not fit: rank ") + std::to_string(rank_) + " could not allocate " + gib(static_cast<double>(bytes)) +
                       " with " + gib(live_) + " live");
    }
    reserved_ += static_cast<double>(bytes);
    peak_reserved_ = std::max(peak_reserved_, reserved_);
  }
  if (static_cast<size_t>(id) >= blocks_.size()) blocks_.resize(static_cast<size_t>(id) + 1, {0, nullptr});
  blocks_[static_cast<size_t>(id)] = {bytes, block};
  live_ += static_cast<double>(bytes);
  peak_ = std::max(peak_, live_);
  return block;
}

void Arena::free(int32_t id) {
  auto& b = blocks_[static_cast<size_t>(id)];
  if (b.second == nullptr) return;
  live_ -= static_cast<double>(b.first);
  cache_.emplace(b.first, b.second);
  b = {0, nullptr};
}

}  // namespace stepcast::validate
