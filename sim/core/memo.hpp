// A value per name, computed once per process and handed out as copies: the built-in model zoo
// and hardware profiles, parsed from their embedded JSON on first use (the planner's framework
// round trips look them up for every layout). Safe to call from the planner's worker threads;
// a computation that throws caches nothing, so the next call throws again.
#pragma once

#include <map>
#include <mutex>
#include <string>

namespace stepcast::core {

template <class T>
class OncePerName {
 public:
  template <class Make>
  T get(const std::string& name, Make make) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (const auto it = values_.find(name); it != values_.end()) return it->second;
    }
    T value = make();  // outside the lock: two threads may both compute a first use, alike
    const std::lock_guard<std::mutex> lock(mutex_);
    return values_.emplace(name, std::move(value)).first->second;
  }

 private:
  std::mutex mutex_;
  std::map<std::string, T> values_;
};

}  // namespace stepcast::core
