#include "sim/config/framework_import.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <utility>

#include "models/model_spec.hpp"
#include "sim/config/hardware.hpp"
#include "sim/core/error.hpp"

namespace stepcast::config {

using core::Json;

Json model_reference(const std::string& model) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(model, ec)) return {{"path", std::filesystem::absolute(model).string()}};
  return model;
}

void note_ignored(Json& run, const std::vector<std::string>& ignored) {
  if (ignored.empty()) return;
  std::string list;
  for (const auto& k : ignored) list += (list.empty() ? "" : " ") + k;
  run["notes"] = "ignored (no modelled cost): " + list;
}

namespace {

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

// Integer arithmetic of $(( ... )): + - * / % with parentheses and unary signs; names are the
// script's variables (bash reads NAME and $NAME alike there). nullopt when it is anything else,
// overflows, or nests deeper than kMaxDepth (operators, parentheses and variables that name
// variables together).
class Arithmetic {
 public:
  Arithmetic(std::string text, const std::map<std::string, std::vector<std::string>>& vars, int depth = 0)
      : s_(std::move(text)), vars_(vars), depth_(depth) {}
  std::optional<long long> value() {
    auto v = sum();
    skip();
    if (!v || i_ != s_.size()) return std::nullopt;
    return v;
  }

 private:
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_])) != 0) ++i_;
  }
  std::optional<long long> sum() {
    auto v = product();
    for (skip(); v && i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-'); skip()) {
      const char op = s_[i_++];
      const auto r = product();
      if (!r) return std::nullopt;
      long long out = 0;
      if (op == '+' ? __builtin_add_overflow(*v, *r, &out) : __builtin_sub_overflow(*v, *r, &out)) return std::nullopt;
      v = out;
    }
    return v;
  }
  std::optional<long long> product() {
    auto v = unary();
    for (skip(); v && i_ < s_.size() && (s_[i_] == '*' || s_[i_] == '/' || s_[i_] == '%'); skip()) {
      const char op = s_[i_++];
      const auto r = unary();
      if (!r || (op != '*' && (*r == 0 || (*r == -1 && *v == std::numeric_limits<long long>::min())))) return std::nullopt;
      long long out = 0;
      if (op == '*' && __builtin_mul_overflow(*v, *r, &out)) return std::nullopt;
      v = op == '*' ? out : op == '/' ? *v / *r : *v % *r;
    }
    return v;
  }
  std::optional<long long> unary() {
    if (++depth_ > kMaxDepth) return std::nullopt;
    skip();
    if (i_ < s_.size() && (s_[i_] == '-' || s_[i_] == '+')) {
      const bool neg = s_[i_++] == '-';
      const auto v = unary();
      if (!v || *v == std::numeric_limits<long long>::min()) return std::nullopt;
      return neg ? -*v : *v;
    }
    if (i_ < s_.size() && s_[i_] == '(') {
      ++i_;
      const auto v = sum();
      skip();
      if (!v || i_ >= s_.size() || s_[i_] != ')') return std::nullopt;
      ++i_;
      return v;
    }
    if (i_ < s_.size() && s_[i_] == '$') ++i_;
    const size_t b = i_;
    if (i_ < s_.size() && ident_start(s_[i_])) {
      while (i_ < s_.size() && ident_char(s_[i_])) ++i_;
      const auto it = vars_.find(s_.substr(b, i_ - b));
      if (it == vars_.end() || it->second.empty()) return std::nullopt;
      Arithmetic inner(it->second.front(), vars_, depth_);
      return inner.value();
    }
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_])) != 0) ++i_;
    if (b == i_ || i_ - b > 18) return std::nullopt;
    return std::stoll(s_.substr(b, i_ - b));
  }

  static constexpr int kMaxDepth = 200;
  std::string s_;
  const std::map<std::string, std::vector<std::string>>& vars_;
  size_t i_ = 0;
  int depth_ = 0;
};

// The words of a launch script, as the shell would hand them to its commands (see the header).
// A script whose arrays would expand past kMaxWords words (an array appended to itself over and
// over) is refused rather than expanded.
class ScriptSplitter {
 public:
  explicit ScriptSplitter(const std::string& text) : t_(text) {}

  std::vector<std::string> run() {
    while (i_ < t_.size()) step();
    if (quote_ != 0) throw core::UserError("the command line has an unclosed " + std::string(1, quote_) + " quote");
    if (!array_.empty()) throw core::UserError("the array " + array_ + "=( ... ) is not closed with )");
    end_word();
    end_command();
    return out_;
  }

 private:
  struct Word {
    std::string text;
    size_t assign_at = std::string::npos;  // the unquoted '=' of NAME=value, at the word's start
    bool append = false;                   // NAME+=value
  };

  void step() {
    const char c = t_[i_];
    if (quote_ == '\'') {
      if (c == '\'') {
        quote_ = 0;
      } else {
        cur_.text += c;
      }
      ++i_;
      return;
    }
    if (quote_ == '"') {
      if (c == '"') {
        quote_ = 0;
        ++i_;
      } else if (c == '\\' && i_ + 1 < t_.size() && std::string("\"\\$`").find(t_[i_ + 1]) != std::string::npos) {
        cur_.text += t_[i_ + 1];
        i_ += 2;
      } else if (c == '\\' && i_ + 1 < t_.size() && t_[i_ + 1] == '\n') {
        i_ += 2;
      } else if (c == '$') {
        expand(true);
      } else {
        cur_.text += c;
        ++i_;
      }
      return;
    }
    if (c == '\\' && i_ + 1 < t_.size()) {
      if (t_[i_ + 1] == '\n' || t_[i_ + 1] == '\r') {
        ++i_;  // a continued line
        while (i_ < t_.size() && (t_[i_] == '\n' || t_[i_] == '\r')) ++i_;
      } else {
        cur_.text += t_[i_ + 1];
        in_word_ = true;
        i_ += 2;
      }
      return;
    }
    if (c == '#' && !in_word_) {
      while (i_ < t_.size() && t_[i_] != '\n') ++i_;  // a comment to the line's end
      return;
    }
    if (c == '\'' || c == '"') {
      quote_ = c;
      in_word_ = true;
      ++i_;
      return;
    }
    if (c == ' ' || c == '\t' || c == '\r' || (c == '\n' && !array_.empty())) {
      end_word();
      ++i_;
      return;
    }
    if (c == '>' || c == '<') {
      // A redirection (2>&1, > log, >> log, < in): neither it nor its target is an argument.
      if (in_word_ && !in_word_expanded_ && std::all_of(cur_.text.begin(), cur_.text.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; })) {
        cur_ = Word{};
        in_word_ = false;
      }
      end_word();
      ++i_;
      while (i_ < t_.size() && (t_[i_] == '>' || t_[i_] == '<')) ++i_;
      if (i_ < t_.size() && t_[i_] == '&') {
        ++i_;
        while (i_ < t_.size() && (std::isdigit(static_cast<unsigned char>(t_[i_])) != 0 || t_[i_] == '-')) ++i_;
      } else {
        skip_next_word_ = true;
      }
      return;
    }
    if (c == '\n' || c == ';' || c == '|' || c == '&') {
      end_word();
      if (array_.empty()) end_command();
      ++i_;
      return;
    }
    if (c == '(' && array_.empty() && cmd_words_before_command() && cur_.assign_at != std::string::npos &&
        cur_.assign_at + 1 == cur_.text.size()) {
      // NAME=( words ... ): an array, over as many lines as it takes.
      array_ = cur_.text.substr(0, cur_.assign_at - (cur_.append ? 1 : 0));
      array_append_ = cur_.append;
      array_words_.clear();
      cur_ = Word{};
      in_word_ = false;
      ++i_;
      return;
    }
    if (c == ')' && !array_.empty()) {
      end_word();
      auto& v = vars_[array_];
      if (!array_append_) v.clear();
      count_words(v.size());
      v.insert(v.end(), array_words_.begin(), array_words_.end());
      array_.clear();
      ++i_;
      return;
    }
    if (c == '$') {
      expand(false);
      return;
    }
    if (c == '=' && !in_word_expanded_ && cur_.assign_at == std::string::npos && in_word_ && array_.empty()) {
      const std::string& w = cur_.text;
      const bool plus = !w.empty() && w.back() == '+';
      const std::string name = plus ? w.substr(0, w.size() - 1) : w;
      if (!name.empty() && ident_start(name.front()) && std::all_of(name.begin(), name.end(), ident_char)) {
        cur_.assign_at = w.size();
        cur_.append = plus;
      }
    }
    cur_.text += c;
    in_word_ = true;
    ++i_;
  }

  // At the start of a command, or after its leading assignments or export / declare (and the
  // declaration's options).
  bool cmd_words_before_command() const {
    const bool declaration = !cmd_.empty() && is_declaration(cmd_.front().text);
    for (size_t k = declaration ? 1 : 0; k < cmd_.size(); ++k) {
      const Word& w = cmd_[k];
      if (w.assign_at == std::string::npos && !(declaration && w.text.size() > 1 && w.text[0] == '-')) return false;
    }
    return true;
  }
  static bool is_declaration(const std::string& w) {
    return w == "export" || w == "declare" || w == "local" || w == "readonly" || w == "typeset";
  }

  // $NAME, ${NAME}, ${NAME[@]}, ${NAME[N]}, the defaults ${NAME:-word} and ${NAME-word}, the
  // assigning ${NAME:=word}, the alternative ${NAME:+word}, $(( arithmetic )); anything else
  // ($1, $@, $(command), ${NAME:?}, a name the script does not set) stays as written.
  void expand(bool quoted) {
    const size_t start = i_;
    ++i_;  // the $
    std::optional<std::vector<std::string>> value;
    bool all = false;
    if (i_ < t_.size() && t_[i_] == '(') {
      // $(( arithmetic )) or $(command): up to the matching parenthesis. A command, or
      // arithmetic it cannot evaluate, stays as written (one piece, whatever it holds).
      int depth = 0;
      size_t j = i_;
      for (; j < t_.size(); ++j) {
        if (t_[j] == '(') ++depth;
        if (t_[j] == ')' && --depth == 0) break;
      }
      if (j >= t_.size()) throw core::UserError("the script's " + t_.substr(start, std::min<size_t>(40, t_.size() - start)) + " is not closed with )");
      if (t_.compare(i_, 2, "((") == 0 && j > i_ + 2 && t_[j - 1] == ')') {
        Arithmetic a(t_.substr(i_ + 2, j - 1 - (i_ + 2)), vars_);
        if (const auto v = a.value()) value = std::vector<std::string>{std::to_string(*v)};
      }
      i_ = j + 1;
      if (!value) {
        cur_.text += t_.substr(start, j + 1 - start);
        in_word_ = true;
        in_word_expanded_ = true;
        return;
      }
    } else if (i_ < t_.size() && t_[i_] == '{') {
      // The matching brace (a word may hold ${NAME} itself), within 4,096 characters: no real
      // expansion is longer, and a file of unclosed ${ is then read in linear time.
      size_t close = i_ + 1;
      const size_t limit = std::min(t_.size(), i_ + 4096);
      for (int depth = 1; close < limit; ++close) {
        if (t_[close] == '{') ++depth;
        if (t_[close] == '}' && --depth == 0) break;
      }
      if (close < limit) {
        const std::string inner = t_.substr(i_ + 1, close - i_ - 1);
        // NAME or NAME[sub], then an operator and its word: -, =, + or ? (unset), each with a
        // leading : (unset or empty).
        size_t n = 0;
        while (n < inner.size() && (n == 0 ? ident_start(inner[n]) : ident_char(inner[n]))) ++n;
        std::string name = inner.substr(0, n);
        std::optional<size_t> index;
        if (n > 0 && n < inner.size() && inner[n] == '[') {
          const size_t b = inner.find(']', n);
          const std::string sub = b == std::string::npos ? std::string() : inner.substr(n + 1, b - n - 1);
          if (sub == "@" || sub == "*") {
            all = true;
          } else if (!sub.empty() && std::all_of(sub.begin(), sub.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; }) && sub.size() < 9) {
            index = std::stoul(sub);
          } else {
            name.clear();
          }
          n = b == std::string::npos ? inner.size() : b + 1;
        }
        const std::string rest = inner.substr(n);
        const bool colon = !rest.empty() && rest[0] == ':';
        const std::string op_word = colon ? rest.substr(1) : rest;
        const char op = op_word.empty() ? '\0' : op_word[0];
        if ((colon && op == '\0') || (op != '\0' && std::string("-=+").find(op) == std::string::npos)) name.clear();  // ${X?}, ${X/a/b}, ...
        if (!name.empty()) {
          const std::string word = op == '\0' ? std::string() : substitute(op_word.substr(1));
          const auto it = vars_.find(name);
          const bool set = it != vars_.end() && (all || !it->second.empty());
          std::vector<std::string> current;
          if (set && all) {
            current = it->second;
          } else if (set) {
            const size_t k = index.value_or(0);
            current = {k < it->second.size() ? it->second[k] : std::string()};
          }
          const bool empty = std::all_of(current.begin(), current.end(), [](const std::string& x) { return x.empty(); });
          const bool use_word = colon ? (!set || empty) : !set;
          if (op == '\0') {
            if (set) value = current;
          } else if (op == '+') {
            value = std::vector<std::string>{use_word ? std::string() : word};  // the alternative when set
            all = false;
          } else if (use_word) {
            value = std::vector<std::string>{word};
            all = false;
            if (op == '=' && !index) vars_[name] = {word};  // ${X:=word} assigns it too
          } else {
            value = current;
          }
          if (value) i_ = close + 1;
        }
      }
    } else if (i_ < t_.size() && ident_start(t_[i_])) {
      size_t j = i_;
      while (j < t_.size() && ident_char(t_[j])) ++j;
      if (const auto it = vars_.find(t_.substr(i_, j - i_)); it != vars_.end()) {
        value = std::vector<std::string>{it->second.empty() ? std::string() : it->second.front()};
        i_ = j;
      }
    }
    if (!value) {
      // Not expanded: the $ stays, and the rest is read as ordinary text.
      i_ = start + 1;
      cur_.text += '$';
      in_word_ = true;
      return;
    }
    in_word_expanded_ = true;
    if (!all) {
      cur_.text += value->empty() ? std::string() : value->front();
      in_word_ = in_word_ || quoted || !cur_.text.empty();
      return;
    }
    // An array's elements are words of their own, the first joined to what precedes it.
    for (size_t k = 0; k < value->size(); ++k) {
      if (k > 0) end_word();
      cur_.text += (*value)[k];
      in_word_ = true;
    }
  }

  // An operator's word with its $NAME and ${NAME} replaced by their (scalar) values; names
  // the script does not set stay as written.
  std::string substitute(const std::string& w) const {
    std::string out;
    for (size_t k = 0; k < w.size();) {
      if (w[k] == '$' && k + 1 < w.size()) {
        const bool braced = w[k + 1] == '{';
        size_t a = k + (braced ? 2 : 1), b = a;
        while (b < w.size() && (b == a ? ident_start(w[b]) : ident_char(w[b]))) ++b;
        const bool closed = !braced || (b < w.size() && w[b] == '}');
        if (b > a && closed) {
          if (const auto it = vars_.find(w.substr(a, b - a)); it != vars_.end() && !it->second.empty()) {
            out += it->second.front();
            k = b + (braced ? 1 : 0);
            continue;
          }
        }
      }
      out += w[k++];
    }
    return out;
  }

  static constexpr size_t kMaxWords = 1000000;
  void count_words(size_t more) {
    words_ += more;
    if (words_ > kMaxWords) {
      throw core::UserError("the script expands to more than " + std::to_string(kMaxWords) + " words (an array that grows with itself?)");
    }
  }

  void end_word() {
    if (in_word_) count_words(1);
    if (in_word_ && skip_next_word_) {
      skip_next_word_ = false;  // a redirection's target
    } else if (in_word_) {
      if (!array_.empty()) {
        array_words_.push_back(cur_.text);
      } else {
        cmd_.push_back(cur_);
      }
    }
    cur_ = Word{};
    in_word_ = false;
    in_word_expanded_ = false;
  }

  // Leading NAME=value words (and export / declare ones) set variables; the rest is a command
  // whose words are the script's arguments.
  void end_command() {
    size_t k = 0;
    bool declaration = false;
    for (; k < cmd_.size(); ++k) {
      const Word& w = cmd_[k];
      if (k == 0 && is_declaration(w.text)) {
        declaration = true;
        continue;
      }
      if (declaration && w.text.size() > 1 && w.text[0] == '-' && w.assign_at == std::string::npos) continue;  // declare -a
      if (w.assign_at == std::string::npos) {
        if (declaration) continue;  // export NAME: nothing to set
        break;
      }
      const std::string name = w.text.substr(0, w.assign_at - (w.append ? 1 : 0));
      const std::string val = w.text.substr(w.assign_at + 1);
      auto& v = vars_[name];
      if (w.append && !v.empty()) {
        v.front() += val;
      } else {
        v = {val};
      }
    }
    if (!declaration) {
      for (; k < cmd_.size(); ++k) out_.push_back(cmd_[k].text);
    }
    cmd_.clear();
  }

  const std::string& t_;
  size_t i_ = 0;
  char quote_ = 0;
  Word cur_;
  bool in_word_ = false;
  bool in_word_expanded_ = false;
  bool skip_next_word_ = false;
  std::vector<Word> cmd_;
  std::string array_;
  bool array_append_ = false;
  std::vector<std::string> array_words_;
  std::map<std::string, std::vector<std::string>> vars_;
  std::vector<std::string> out_;
  size_t words_ = 0;
};

}  // namespace

std::vector<std::string> split_command_line(const std::string& text) { return ScriptSplitter(text).run(); }

namespace {

// Switches: Megatron arguments that take no value (the others take the next word).
const std::set<std::string> kSwitches = {
    "swiglu", "group-query-attention", "untie-embeddings-and-output-weights", "sequence-parallel", "use-distributed-optimizer",
    "overlap-grad-reduce", "overlap-param-gather", "tp-comm-overlap", "bf16", "fp16", "disable-bias-linear", "add-bias-linear",
    "qk-layernorm", "multi-latent-attention", "use-torch-fsdp2", "use-megatron-fsdp", "use-custom-fsdp",
    "account-for-embedding-in-pipeline-split", "account-for-loss-in-pipeline-split", "moe-grouped-gemm", "use-flash-attn",
    "use-mcore-models", "use-legacy-models", "no-masked-softmax-fusion", "no-bias-gelu-fusion", "no-bias-swiglu-fusion",
    "no-gradient-accumulation-fusion", "no-async-tensor-model-parallel-allreduce", "use-rotary-position-embeddings",
    "log-throughput", "mock-data", "standalone", "moe-permute-fusion", "cross-entropy-loss-fusion", "manual-gc", "no-load-optim", "no-load-rng",
    "squared-relu", "no-position-embedding", "apply-layernorm-1p", "is-hybrid-model", "no-bias-dropout-fusion", "no-rope-fusion", "use-checkpoint-args",
    "no-save-optim", "no-save-rng", "exit-on-missing-checkpoint", "eval-only", "use-cpu-initialization", "overlap-p2p-communication",
    "add-qkv-bias", "grad-reduce-in-bf16", "moe-pad-expert-input-to-capacity", "fp8-param-gather",
    // Megatron-DeepSpeed's switches.
    "deepspeed", "no-pipeline-parallel", "checkpoint-activations", "deepspeed-activation-checkpointing", "partition-activations",
    "contigious-checkpointing", "checkpoint-in-cpu", "synchronize-each-layer", "embed-layernorm", "use-flash-attn-v1", "use-flash-attn-v2",
    "use-flash-attn-triton"};
// Arguments that take a list of words (argparse nargs='*').
const std::set<std::string> kLists = {"recompute-modules", "data-path", "train-data-path", "valid-data-path", "test-data-path"};

struct Parsed {
  std::map<std::string, std::vector<std::string>> values;  // argument (dashes) -> its words
};

Parsed parse(const std::vector<std::string>& args) {
  Parsed p;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& tok = args[i];
    if (tok.size() < 3 || tok.compare(0, 2, "--") != 0) continue;  // the launcher, the script, a stray word
    std::string name = tok.substr(2);
    std::vector<std::string> words;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      words.push_back(name.substr(eq + 1));
      name = name.substr(0, eq);
    }
    std::replace(name.begin(), name.end(), '_', '-');
    auto is_flag = [&](size_t j) { return j < args.size() && args[j].size() >= 2 && args[j].compare(0, 2, "--") == 0; };
    if (words.empty() && !kSwitches.count(name)) {
      if (kLists.count(name)) {
        while (i + 1 < args.size() && !is_flag(i + 1)) words.push_back(args[++i]);
      } else if (i + 1 < args.size() && !is_flag(i + 1)) {
        words.push_back(args[++i]);
      }
    }
    p.values[name] = words;
  }
  return p;
}

class Reader {
 public:
  explicit Reader(Parsed p) : p_(std::move(p)) {}

  bool has(const std::string& name) {
    used_.insert(name);
    return p_.values.count(name) != 0;
  }
  std::string word(const std::string& name, const std::string& def = "") {
    if (!has(name)) return def;
    const auto& w = p_.values.at(name);
    if (w.size() != 1) throw core::UserError("--" + name + ": expected one value");
    return w.front();
  }
  std::vector<std::string> words(const std::string& name) {
    if (!has(name)) return {};
    return p_.values.at(name);
  }
  int64_t integer(const std::string& name, int64_t lo, int64_t hi, int64_t def) {
    if (!has(name)) return def;
    return parse_int(name, word(name), lo, hi);
  }
  int64_t required(const std::string& name, int64_t lo, int64_t hi, const std::string& why) {
    if (!has(name)) throw core::UserError("--" + name + ": required (" + why + ")");
    return integer(name, lo, hi, 0);
  }
  static int64_t parse_int(const std::string& name, const std::string& v, int64_t lo, int64_t hi) {
    errno = 0;
    char* end = nullptr;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || end == nullptr || *end != '\0' || errno != 0 || x < lo || x > hi) {
      throw core::UserError("--" + name + ": got '" + v + "'; expected a whole number from " + std::to_string(lo) + " to " + std::to_string(hi));
    }
    return x;
  }
  // Arguments present that nothing read.
  [[nodiscard]] std::vector<std::string> unused() const {
    std::vector<std::string> out;
    for (const auto& [k, v] : p_.values) {
      if (!used_.count(k)) out.push_back("--" + k);
    }
    return out;
  }

 private:
  Parsed p_;
  std::set<std::string> used_;
};

// DeepSpeed's gradient dtype: its BF16 optimizer (`why` says when it runs) keeps bf16 gradients
// beside an fp32 accumulation buffer; otherwise gradients are kept and reduced in the model dtype.
void deepspeed_gradients(bool bf16_optimizer, const std::string& why, const std::string& precision, Json& training,
                         std::vector<std::string>& assumptions) {
  if (bf16_optimizer) {
    training["grad_dtype"] = "fp32";
    training["lp_grads"] = true;
    assumptions.push_back("training: DeepSpeed's BF16 optimizer (" + why + "): bf16 gradients kept beside the fp32 accumulation buffer");
  } else if (precision != "fp32") {
    training["grad_dtype"] = precision;
    assumptions.push_back("training: gradients kept and reduced in " + precision + " (DeepSpeed's communication_data_type follows the model dtype)");
  }
}

// Megatron-DeepSpeed (--deepspeed): DeepSpeed's engine runs the optimizer and the data
// parallelism (ZeRO stage from --zero-stage, else the DeepSpeed config's zero_optimization.stage,
// else Megatron-DeepSpeed's default 1) and, with pp > 1 unless --no-pipeline-parallel, its
// pipeline engine (deepspeed/runtime/pipe): 1F1B only, ZeRO 0-1, blocking send/receive pairs
// of whole activations from every TP rank, every in-flight stage output kept in its buffers,
// gradients reduced after the backward in flattened buckets of 5e8 elements.
void import_megatron_deepspeed(Reader& a, int64_t pp, const std::string& precision, Json& parallel, Json& training,
                               std::vector<std::string>& assumptions) {
  int zero = 1;
  if (a.has("zero-stage")) {
    const std::string w = a.word("zero-stage");
    char* end = nullptr;
    const double z = std::strtod(w.c_str(), &end);
    if (w.empty() || end != w.c_str() + w.size() || !(z == 0 || z == 1 || z == 2 || z == 3)) {
      throw core::UserError("--zero-stage: got '" + w + "'; expected 0, 1, 2 or 3");
    }
    zero = static_cast<int>(z);
  } else {
    const std::string cfg = a.has("deepspeed-config") ? a.word("deepspeed-config") : "";
    std::ifstream in(cfg);
    Json c;
    if (!cfg.empty() && in) {
      try {
        c = Json::parse(in);
      } catch (const Json::parse_error& e) {
        throw core::UserError("--deepspeed_config " + cfg + ": not valid JSON (" + e.what() + ")");
      }
    }
    if (c.is_object() && c.contains("zero_optimization") && c["zero_optimization"].is_object() && c["zero_optimization"].contains("stage")) {
      const Json& st = c["zero_optimization"]["stage"];
      if (!st.is_number_integer() || st.get<int64_t>() < 0 || st.get<int64_t>() > 3) {
        throw core::UserError("--deepspeed_config " + cfg + ": zero_optimization.stage: got " + st.dump() + "; expected 0, 1, 2 or 3");
      }
      zero = static_cast<int>(st.get<int64_t>());
      assumptions.push_back("parallel: ZeRO stage " + std::to_string(zero) + " from " + cfg + " (zero_optimization.stage)");
    } else {
      assumptions.push_back("parallel: ZeRO stage 1 (Megatron-DeepSpeed's --zero-stage default; " +
                            (cfg.empty() ? std::string("no --deepspeed_config") : "--deepspeed_config " + cfg + " unread or without zero_optimization.stage") +
                            ")");
    }
  }
  // What the Megatron-LM reading assumed about its own optimizer, buckets and attention does
  // not hold under DeepSpeed's engine.
  auto drop = [&](const std::string& prefix) {
    assumptions.erase(std::remove_if(assumptions.begin(), assumptions.end(), [&](const std::string& x) { return x.rfind(prefix, 0) == 0; }),
                      assumptions.end());
  };
  for (const char* prefix : {"training: fp32 main gradients", "parallel: gradient buckets of", "parallel: gradients reduced in one piece",
                             "training: fused attention (Transformer Engine"}) {
    drop(prefix);
  }
  parallel.erase("fsdp");
  parallel.erase("dp_replicate");
  parallel.erase("bucket_layout");
  parallel["zero_stage"] = zero;
  parallel["grad_reduce_overlap"] = false;
  parallel["param_gather_overlap"] = false;
  assumptions.push_back("parallel: DeepSpeed reduces gradients after the backward (overlap_comm off below ZeRO-3) and ZeRO-1/2 all-gathers the updated "
                        "partitions inside the optimizer step");
  const bool bf16_optimizer = precision == "bf16" && zero <= 1;
  deepspeed_gradients(bf16_optimizer, "bf16, ZeRO 0-1", precision, training, assumptions);
  parallel["bucket_mb"] = 5e8 * (bf16_optimizer || precision == "fp32" ? 4.0 : 2.0) / 1e6;
  assumptions.push_back("parallel: gradient buckets of 5e8 elements (DeepSpeed's reduce_bucket_size)");
  // Its attention: FlashAttention only when asked for, else the unfused core attention (with
  // Megatron's fused scale-mask-softmax kernel).
  if (a.has("use-flash-attn-v2") || a.has("use-flash-attn") || a.has("use-flash-attn-v1") || a.has("use-flash-attn-triton")) {
    training["attention"] = "flash2";
  } else {
    training["attention"] = "unfused";
    assumptions.push_back("training: unfused attention (Megatron-DeepSpeed runs FlashAttention only with --use-flash-attn-v2 and the like)");
  }
  if (!parallel.contains("recompute") && (a.has("checkpoint-activations") || a.has("deepspeed-activation-checkpointing"))) {
    parallel["recompute"] = "full";
    assumptions.push_back("parallel: --checkpoint-activations: every layer recomputed (full)");
  }
  if (pp > 1 && !a.has("no-pipeline-parallel")) {
    // Its partition method 'type:transformer|embedding' balances the embedding (on the first
    // stage, and its tied copy on the last) as a layer each.
    if (const std::string part = a.word("pp-partition-method", "parameters"); part.find("embedding") != std::string::npos) {
      parallel["account_for_embedding_in_pipeline_split"] = true;
      parallel["account_for_loss_in_pipeline_split"] = true;
      assumptions.push_back("parallel: --pp-partition-method " + part + ": the embedding and the head each take a layer's place in the pipeline split");
    }
    if (zero >= 2) throw core::UserError("--zero-stage: got " + std::to_string(zero) + "; DeepSpeed's pipeline engine runs ZeRO stage 0 or 1 (or pass --no-pipeline-parallel)");
    if (parallel.contains("vpp")) throw core::UserError("--virtual-pipeline-model-parallel-size: DeepSpeed's pipeline engine runs 1F1B without virtual stages");
    parallel["schedule"] = "1f1b";
    deepspeed_pipeline_engine(parallel, bf16_optimizer || precision == "fp32" ? 4.0 : 2.0, assumptions);
  }
}

}  // namespace

Json import_megatron(const std::vector<std::string>& args, const ImportOptions& opt) {
  Reader a(parse(args));
  std::vector<std::string> assumptions;
  constexpr int64_t kBig = int64_t{1} << 40;

  // --- cluster: --gpus, else torchrun's nodes x processes per node ---
  auto torchrun = [&](const std::string& name) -> int64_t {
    if (!a.has(name)) return 0;
    std::string v = a.word(name);
    if (const size_t colon = v.find(':'); colon != std::string::npos) v = v.substr(colon + 1);  // elastic "min:max"
    return Reader::parse_int(name, v, 1, 1 << 20);
  };
  const int64_t nproc = torchrun("nproc-per-node"), nnodes = torchrun("nnodes");
  int64_t gpus = opt.gpus;
  if (gpus <= 0) gpus = nproc > 0 ? nproc * std::max<int64_t>(1, nnodes) : 0;
  if (gpus <= 0) throw core::UserError("the GPU count: give --gpus, or torchrun's --nnodes and --nproc-per-node among the arguments");
  Json cluster = {{"num_gpus", gpus}};
  const int64_t per_node = opt.gpus_per_node > 0 ? opt.gpus_per_node : nproc;
  if (per_node > 0) cluster["gpus_per_node"] = per_node;

  // --- training ---
  const int64_t seq = a.required("seq-length", 1, kBig, "the sequence length");
  const int64_t mbs = a.integer("micro-batch-size", 1, kBig, 1);
  if (!a.has("micro-batch-size")) assumptions.push_back("training: micro-batch size 1 (Megatron's default)");
  Json training = {{"seq_len", seq}};
  std::string precision = "fp32";
  if (a.has("fp8-format")) {
    precision = "fp8";
    assumptions.push_back("training: fp8 GEMMs (--fp8-format " + a.word("fp8-format") + ") with bf16 elsewhere");
  } else if (a.has("bf16")) {
    precision = "bf16";
  } else if (a.has("fp16")) {
    precision = "fp16";
  } else {
    assumptions.push_back("training: fp32 (neither --bf16 nor --fp16 is given)");
  }
  training["precision"] = precision;
  if (precision == "fp8") {
    // Transformer Engine keeps each weight's fp8 copy and transpose across the micro-batches:
    // beside the 16-bit parameters, or as the parameters themselves under --fp8-param-gather.
    training["fp8_weights"] = a.has("fp8-param-gather") ? "primary" : "cached";
    if (!a.has("fp8-param-gather")) {
      assumptions.push_back("training: 16-bit parameters with cached fp8 copies and transposes (no --fp8-param-gather)");
    }
  }
  if (precision != "fp32" && a.has("grad-reduce-in-bf16")) {
    training["grad_dtype"] = "bf16";
  } else if (precision != "fp32") {
    training["grad_dtype"] = "fp32";
    assumptions.push_back("training: fp32 main gradients, reduced in fp32 (Megatron's mixed-precision default)");
  }
  const std::string optimizer = a.word("optimizer", "adam");
  if (optimizer != "adam" && optimizer != "sgd") throw core::UserError("--optimizer: got '" + optimizer + "'; stepcast models adam and sgd");
  training["optimizer"] = optimizer;
  const std::string attention = a.word("attention-backend", "auto");
  if (attention == "unfused" || attention == "local") {
    training["attention"] = "unfused";
  } else {
    assumptions.push_back("training: fused attention (Transformer Engine's flash / cuDNN kernels, --attention-backend " + attention + ")");
  }
  if (const int64_t mtp = a.integer("mtp-num-layers", 0, 64, 0); mtp > 0) training["mtp_layers"] = mtp;

  // --- model ---
  Json model;
  const int64_t layers_arg = a.integer("num-layers", 1, 1 << 20, 0);
  if (!opt.model.empty()) {
    model = opt.model;
  } else {
    // Newer Megatron-Core releases count a hybrid model's layers from its pattern when
    // --num-layers is left out (the blocks before any '/', '|' marks aside).
    int64_t pattern_blocks = 0;
    for (const char* k : {"hybrid-layer-pattern", "hybrid-override-pattern"}) {
      if (pattern_blocks > 0 || !a.has(k)) continue;
      const std::string w = a.word(k);
      for (const char c : w.substr(0, w.find('/'))) pattern_blocks += c != '|' ? 1 : 0;
    }
    const int64_t L = layers_arg == 0 && pattern_blocks > 0 ? pattern_blocks : a.required("num-layers", 1, 1 << 20, "the model's layers, or give --model");
    const int64_t h = a.required("hidden-size", 1, kBig, "the model's width, or give --model");
    const int64_t heads = a.required("num-attention-heads", 1, 1 << 20, "or give --model");
    // Megatron-DeepSpeed's --pad-vocab-size-to fixes the embedding's rows when the tokenizer
    // gives the vocabulary.
    const int64_t vocab = !a.has("vocab-size") && a.has("pad-vocab-size-to")
                              ? a.integer("pad-vocab-size-to", 1, kBig, 0)
                              : a.required("vocab-size", 1, kBig, "Megatron takes the vocabulary from the tokenizer, which the arguments do not show; or give --model");
    const bool swiglu = a.has("swiglu");
    int64_t ffn = a.integer("ffn-hidden-size", 1, kBig, 0);
    if (ffn == 0) {
      ffn = swiglu ? (4 * h * 2 / 3) / 64 * 64 : 4 * h;
      assumptions.push_back("model: MLP width " + std::to_string(ffn) + (swiglu ? " (Megatron's default with --swiglu: int(8h/3 / 64) x 64)" : " (Megatron's default 4h)"));
    }
    model = {{"name", "Megatron arguments: " + std::to_string(L) + " layers, hidden " + std::to_string(h)},
             {"num_hidden_layers", L}, {"hidden_size", h}, {"num_attention_heads", heads}, {"intermediate_size", ffn}, {"vocab_size", vocab},
             {"hidden_act", swiglu ? "silu" : a.has("squared-relu") ? "relu2" : "gelu"}};
    model["num_key_value_heads"] = a.has("group-query-attention") ? a.integer("num-query-groups", 1, heads, 1) : heads;
    if (a.has("kv-channels")) model["head_dim"] = a.integer("kv-channels", 1, kBig, 0);
    const bool untied = a.has("untie-embeddings-and-output-weights");
    model["tie_word_embeddings"] = !untied;
    if (!untied) assumptions.push_back("model: input and output embeddings tied (Megatron's default; --untie-embeddings-and-output-weights unties them)");
    const std::string pos = a.has("no-position-embedding") ? "none" : a.word("position-embedding-type", "learned_absolute");
    if (pos == "learned_absolute") {
      model["position_embedding"] = "learned";
      model["max_position_embeddings"] = a.integer("max-position-embeddings", 1, kBig, seq);
      if (!a.has("position-embedding-type")) assumptions.push_back("model: learned absolute positions (Megatron's default; --no-position-embedding drops them)");
    } else if (pos == "none") {
      model["position_embedding"] = "none";
    } else if (pos == "rope" || pos == "mrope" || pos == "yarn") {
      model["position_embedding"] = "rotary";  // no parameters
    } else if (pos == "alibi") {
      model["position_embedding"] = "alibi";  // Megatron-DeepSpeed (BLOOM): a bias on the scores, no parameters
    } else {
      throw core::UserError("--position-embedding-type: got '" + pos + "'; expected learned_absolute, rope, mrope, yarn, alibi (Megatron-DeepSpeed) or none");
    }
    if (a.has("embed-layernorm")) model["embedding_norm"] = true;  // Megatron-DeepSpeed: a LayerNorm on the token embeddings (BLOOM)
    (void)a.has("max-position-embeddings");
    const std::string norm = a.word("normalization", "LayerNorm");
    if (norm != "LayerNorm" && norm != "RMSNorm") throw core::UserError("--normalization: got '" + norm + "'; expected LayerNorm or RMSNorm");
    model["norm"] = norm == "RMSNorm" ? "rmsnorm" : "layernorm";
    model["linear_bias"] = !a.has("disable-bias-linear");
    if (a.has("disable-bias-linear") && a.has("add-qkv-bias")) model["qkv_bias"] = true;
    if (!a.has("disable-bias-linear")) assumptions.push_back("model: biases on the linear layers (Megatron's default; --disable-bias-linear drops them)");
    (void)a.has("add-bias-linear");
    if (a.has("qk-layernorm")) model["qk_norm"] = true;
    if (const int64_t experts = a.integer("num-experts", 0, 1 << 20, 0); experts > 0) {
      model["num_local_experts"] = experts;
      model["num_experts_per_tok"] = a.integer("moe-router-topk", 1, experts, 2);
      model["moe_intermediate_size"] = a.integer("moe-ffn-hidden-size", 1, kBig, ffn);
      if (const int64_t shared = a.integer("moe-shared-expert-intermediate-size", 0, kBig, 0); shared > 0) {
        model["shared_expert_intermediate_size"] = shared;
        model["n_shared_experts"] = 1;
      }
      if (a.has("moe-layer-freq")) {
        const std::string f = a.word("moe-layer-freq");
        std::smatch m;
        if (std::regex_match(f, m, std::regex(R"(\(?\s*\[0\]\s*\*\s*(\d+)\s*\+\s*\[1\]\s*\*\s*(\d+)\s*\)?)"))) {
          model["first_k_dense_replace"] = std::stoll(m[1]);
          if (std::stoll(m[1]) + std::stoll(m[2]) != L) {
            throw core::UserError("--moe-layer-freq: " + f + " describes " + std::to_string(std::stoll(m[1]) + std::stoll(m[2])) + " layers; --num-layers is " + std::to_string(L));
          }
        } else {
          model["moe_layer_freq"] = Reader::parse_int("moe-layer-freq", f, 1, L);
        }
      }
      if (a.has("moe-router-num-groups")) {
        model["n_group"] = a.integer("moe-router-num-groups", 1, experts, 1);
        model["topk_group"] = a.integer("moe-router-group-topk", 1, experts, 1);
      }
    }
    if (a.has("multi-latent-attention")) {
      if (a.has("q-lora-rank")) model["q_lora_rank"] = a.integer("q-lora-rank", 1, kBig, 0);
      model["kv_lora_rank"] = a.required("kv-lora-rank", 1, kBig, "multi-latent attention's compressed K/V width");
      model["qk_nope_head_dim"] = a.integer("qk-head-dim", 1, kBig, 128);
      model["qk_rope_head_dim"] = a.integer("qk-pos-emb-head-dim", 1, kBig, 64);
      model["v_head_dim"] = a.integer("v-head-dim", 1, kBig, 128);
    }
    // Gated DeltaNet layers (Qwen3-Next and Qwen3.5 in Megatron-LM, --experimental-attention-variant
    // gated_delta_net): the linear-attention shapes, and which layers keep softmax attention
    // (--linear-attention-freq N: layer i when (i + 1) is a multiple of N; or a list with 1 for a
    // Gated DeltaNet layer and 0 for softmax attention, "[1,1,1,0]*12").
    if (const std::string variant = a.word("experimental-attention-variant", ""); !variant.empty()) {
      if (variant != "gated_delta_net" && variant != "gdn") {
        throw core::UserError("--experimental-attention-variant: got '" + variant + "'; stepcast costs gated_delta_net (Gated DeltaNet) layers only");
      }
      model["model_type"] = "qwen3_next";  // the Gated DeltaNet family's keys
      model["linear_num_key_heads"] = a.required("linear-num-key-heads", 1, 1 << 20, "the Gated DeltaNet key heads");
      model["linear_num_value_heads"] = a.required("linear-num-value-heads", 1, 1 << 20, "the Gated DeltaNet value heads");
      model["linear_key_head_dim"] = a.required("linear-key-head-dim", 1, 1 << 20, "the Gated DeltaNet key head width");
      model["linear_value_head_dim"] = a.required("linear-value-head-dim", 1, 1 << 20, "the Gated DeltaNet value head width");
      model["linear_conv_kernel_dim"] = a.integer("linear-conv-kernel-dim", 1, 1 << 10, 4);
      model["attn_output_gate"] = a.has("attention-output-gate");
      model["qk_norm"] = a.has("qk-layernorm");
      const std::string freq = a.word("linear-attention-freq", "");
      if (freq.empty()) throw core::UserError("--linear-attention-freq: missing; give which layers keep softmax attention (an interval N, or a list such as [1,1,1,0]*12)");
      std::smatch fm;
      const std::string compact = std::regex_replace(freq, std::regex(R"(\s+)"), "");
      if (std::regex_match(compact, std::regex(R"(\d+)"))) {
        model["full_attention_interval"] = Reader::parse_int("linear-attention-freq", compact, 1, L);
      } else if (std::regex_match(compact, fm, std::regex(R"(\(?\[([01](?:,[01])*)\](?:\*(\d+))?\)?)"))) {
        std::vector<std::string> one;
        std::stringstream items(fm[1].str());
        for (std::string item; std::getline(items, item, ',');) one.push_back(item == "1" ? "linear_attention" : "full_attention");
        const int64_t times = fm[2].matched ? std::stoll(fm[2].str()) : 1;
        Json types = Json::array();
        for (int64_t t = 0; t < times; ++t) {
          for (const auto& k : one) types.push_back(k);
        }
        if (static_cast<int64_t>(types.size()) != L) {
          throw core::UserError("--linear-attention-freq: " + freq + " describes " + std::to_string(types.size()) + " layers; --num-layers is " + std::to_string(L));
        }
        model["layer_types"] = types;
      } else {
        throw core::UserError("--linear-attention-freq: got '" + freq + "'; expected an interval N or a list of 1 (Gated DeltaNet) and 0 (softmax attention), such as [1,1,1,0]*12");
      }
    }
    // Hybrid Mamba-2 models (pretrain_mamba.py, Megatron-Core's MambaModel): the blocks as
    // --hybrid-override-pattern (newer releases: --hybrid-layer-pattern) lists them, '|'
    // marking pipeline stage boundaries; the Mamba-2 mixer from its arguments or
    // Megatron-Core's defaults.
    const bool layer_pattern = a.has("hybrid-layer-pattern");
    if (a.has("hybrid-override-pattern") || layer_pattern || a.has("hybrid-attention-ratio") || a.has("hybrid-mlp-ratio") || a.has("is-hybrid-model")) {
      std::string pattern = a.word("hybrid-override-pattern", "");
      if (layer_pattern) {
        const std::string given = a.word("hybrid-layer-pattern");
        if (!pattern.empty() && pattern != given) {
          throw core::UserError("--hybrid-layer-pattern \"" + given + "\" disagrees with --hybrid-override-pattern \"" + pattern + "\"; give one");
        }
        pattern = given;
      }
      if (pattern.empty()) {
        throw core::UserError("--hybrid-attention-ratio / --hybrid-mlp-ratio: stepcast reads a hybrid model's blocks from --hybrid-override-pattern "
                              "(one character per layer: M Mamba-2, * attention, - MLP, E MoE); give it");
      }
      (void)a.has("hybrid-attention-ratio");
      (void)a.has("hybrid-mlp-ratio");
      (void)a.has("is-hybrid-model");
      model["hybrid_override_pattern"] = pattern;
      const int64_t head_dim = a.integer("mamba-head-dim", 1, 1 << 20, 64);
      model["mamba_head_dim"] = head_dim;
      model["mamba_num_heads"] = a.integer("mamba-num-heads", 1, 1 << 20, 2 * h / head_dim);
      model["ssm_state_size"] = a.integer("mamba-state-dim", 1, 1 << 20, 128);
      model["n_groups"] = a.integer("mamba-num-groups", 1, 1 << 20, 8);
      assumptions.push_back("model: Mamba-2 mixer as Megatron-Core builds it where the arguments are silent (state 128, head width 64, 8 groups, "
                            "2 x hidden inner width, conv 4, chunk 128)");
    }
  }

  // --- layout ---
  const int64_t tp = a.integer("tensor-model-parallel-size", 1, 1 << 20, 1);
  const int64_t pp = a.integer("pipeline-model-parallel-size", 1, 1 << 20, 1);
  const int64_t cp = a.integer("context-parallel-size", 1, 1 << 20, 1);
  const int64_t ep = a.integer("expert-model-parallel-size", 1, 1 << 20, 1);
  if (gpus % (tp * pp * cp) != 0) {
    throw core::UserError("--tensor-model-parallel-size x --pipeline-model-parallel-size x --context-parallel-size = " + std::to_string(tp * pp * cp) +
                          " does not divide the " + std::to_string(gpus) + " GPUs");
  }
  const int64_t dp = gpus / (tp * pp * cp);
  Json parallel = {{"tp", tp}, {"pp", pp}, {"cp", cp}, {"dp", dp}, {"micro_batch_size", mbs}};
  training["global_batch_size"] = a.integer("global-batch-size", 1, kBig, mbs * dp);
  if (!a.has("global-batch-size")) assumptions.push_back("training: global batch = micro-batch x dp (Megatron's default: no accumulation)");
  if (ep > 1) parallel["ep"] = ep;
  if (a.has("expert-tensor-parallel-size")) parallel["etp"] = a.integer("expert-tensor-parallel-size", 1, 1 << 20, 1);
  if (a.has("virtual-pipeline-model-parallel-size")) parallel["vpp"] = a.integer("virtual-pipeline-model-parallel-size", 1, 1 << 20, 1);
  if (a.has("num-layers-per-virtual-pipeline-stage")) {
    const int64_t per = a.integer("num-layers-per-virtual-pipeline-stage", 1, 1 << 20, 1);
    const int64_t L = layers_arg > 0 ? layers_arg : 0;
    if (L == 0 || L % (pp * per) != 0) {
      throw core::UserError("--num-layers-per-virtual-pipeline-stage: " + std::to_string(per) + " x pp " + std::to_string(pp) + " must divide --num-layers");
    }
    parallel["vpp"] = L / (pp * per);
  }
  if (a.has("sequence-parallel")) parallel["sp"] = true;
  if (a.has("cp-comm-type")) parallel["cp_comm"] = a.word("cp-comm-type");
  if (a.has("decoder-first-pipeline-num-layers")) parallel["first_stage_layers"] = a.integer("decoder-first-pipeline-num-layers", 0, 1 << 20, 0);
  if (a.has("decoder-last-pipeline-num-layers")) parallel["last_stage_layers"] = a.integer("decoder-last-pipeline-num-layers", 0, 1 << 20, 0);
  if (a.has("account-for-embedding-in-pipeline-split")) parallel["account_for_embedding_in_pipeline_split"] = true;
  if (a.has("account-for-loss-in-pipeline-split")) parallel["account_for_loss_in_pipeline_split"] = true;
  if (a.has("pipeline-model-parallel-layout")) parallel["pipeline_layout"] = a.word("pipeline-model-parallel-layout");
  // Megatron-FSDP shards what --data-parallel-sharding-strategy says (its default: everything).
  const std::string sharding = a.word("data-parallel-sharding-strategy", "optim_grads_params");
  if (sharding != "optim_grads_params" && sharding != "optim_grads" && sharding != "optim" && sharding != "no_shard") {
    throw core::UserError("--data-parallel-sharding-strategy: got '" + sharding + "'; expected no_shard, optim, optim_grads or optim_grads_params");
  }
  const bool any_fsdp = a.has("use-torch-fsdp2") || a.has("use-megatron-fsdp") || a.has("use-custom-fsdp");
  const bool fsdp = any_fsdp && sharding == "optim_grads_params";
  if (fsdp) {
    parallel["fsdp"] = true;
  } else if (any_fsdp && sharding == "optim_grads") {
    parallel["zero_stage"] = 2;
  } else if ((any_fsdp && sharding == "optim") || a.has("use-distributed-optimizer")) {
    parallel["zero_stage"] = 1;
  }
  if (a.has("num-distributed-optimizer-instances")) parallel["dp_replicate"] = a.integer("num-distributed-optimizer-instances", 1, 1 << 20, 1);
  // Recomputation.
  const std::string gran = a.word("recompute-granularity", "");
  if (gran == "full") {
    parallel["recompute"] = "full";
    const std::string method = a.word("recompute-method", "uniform");
    const int64_t n = a.integer("recompute-num-layers", 1, 1 << 20, 1);
    if (method == "block") {
      parallel["recompute_layers"] = n;
    } else if (method == "uniform") {
      assumptions.push_back("parallel: recompute full, uniform method: every layer is recomputed (checkpointed in groups of " + std::to_string(n) + ")");
    } else {
      throw core::UserError("--recompute-method: got '" + method + "'; expected uniform or block");
    }
  } else if (gran == "selective") {
    parallel["recompute"] = "selective";
    const auto mods = a.words("recompute-modules");
    if (!mods.empty()) parallel["recompute_modules"] = mods;
  } else if (!gran.empty()) {
    throw core::UserError("--recompute-granularity: got '" + gran + "'; expected full or selective");
  }
  // CPU activation offload (Megatron-Core's cpu_offloading: the first N layers' activations).
  if (a.has("cpu-offloading")) {
    const int64_t n = a.integer("cpu-offloading-num-layers", 0, 1 << 20, 0);
    if (n > 0) parallel["activation_offload_layers"] = n;
    if (n == 0) assumptions.push_back("parallel: --cpu-offloading with --cpu-offloading-num-layers 0 (Megatron's default) offloads nothing");
    if (a.has("cpu-offloading-weights")) assumptions.push_back("parallel: weight offload (--cpu-offloading-weights) is not modelled: the weights stay in device memory");
  }
  // Communication overlap and Megatron-Core DDP buckets.
  const bool overlap_grad = a.has("overlap-grad-reduce");
  parallel["grad_reduce_overlap"] = overlap_grad;
  parallel["param_gather_overlap"] = a.has("overlap-param-gather");
  if (a.has("tp-comm-overlap")) {
    parallel["tp_comm_overlap"] = true;
  } else if (tp > 1 && !a.has("deepspeed")) {
    parallel["tp_async_backward"] = true;
    assumptions.push_back("parallel: the column-parallel layers' backward TP collectives run beside their GEMMs "
                          "(Megatron-Core / Transformer Engine linear layers, without --tp-comm-overlap)");
  }
  if (dp * cp > 1 && !any_fsdp) {  // (Megatron-FSDP buckets by module, as stepcast's sharded runs do)
    parallel["bucket_layout"] = "megatron";
    const double grad_bytes = precision == "fp32" || training.value("grad_dtype", "") == "fp32" ? 4.0 : 2.0;
    if (overlap_grad) {
      const int64_t params = a.has("ddp-bucket-size") ? a.integer("ddp-bucket-size", 1, kBig, 0) : std::max<int64_t>(40'000'000, 1'000'000 * dp * cp);
      parallel["bucket_mb"] = static_cast<double>(params) * grad_bytes / 1e6;
      assumptions.push_back("parallel: gradient buckets of " + std::to_string(params) + " parameters" +
                            (a.has("ddp-bucket-size") ? "" : " (Megatron-Core's default max(40 M, 1 M x dp))") +
                            " on the first stage's first chunk, one bucket per chunk elsewhere (Megatron-Core DDP)");
    } else {
      parallel["bucket_mb"] = 1e6;
      assumptions.push_back("parallel: gradients reduced in one piece after the backward (no --overlap-grad-reduce)");
    }
  }
  if (const std::string d = a.word("moe-token-dispatcher-type", ""); !d.empty()) {
    if (d != "alltoall" && d != "allgather" && d != "flex") throw core::UserError("--moe-token-dispatcher-type: got '" + d + "'; expected alltoall, allgather or flex");
    parallel["moe"] = {{"dispatcher", d}};
  }
  // Token dropping: experts take at most capacity x the balanced share, padded up to it with
  // --moe-pad-expert-input-to-capacity.
  if (a.has("moe-expert-capacity-factor")) {
    const std::string w = a.word("moe-expert-capacity-factor");
    char* end = nullptr;
    const double cf = std::strtod(w.c_str(), &end);
    if (w.empty() || end != w.c_str() + w.size() || !(cf > 0)) throw core::UserError("--moe-expert-capacity-factor: got '" + w + "'; expected a positive number");
    if (!parallel.contains("moe")) parallel["moe"] = Json::object();
    parallel["moe"]["capacity_factor"] = cf;
    if (a.has("moe-pad-expert-input-to-capacity")) parallel["moe"]["pad_to_capacity"] = true;
  }

  if (a.has("deepspeed")) import_megatron_deepspeed(a, pp, precision, parallel, training, assumptions);

  // Everything else: arguments with no modelled cost.
  // With a zoo model the architecture arguments are not read; the run says so (assumptions)
  // rather than listing them as ignored. Anything else unread is listed.
  if (!opt.model.empty()) {
    for (const char* k : {"hidden-size", "num-attention-heads", "vocab-size", "ffn-hidden-size", "swiglu", "squared-relu", "group-query-attention",
                          "num-query-groups", "kv-channels", "untie-embeddings-and-output-weights", "position-embedding-type",
                          "no-position-embedding", "max-position-embeddings", "normalization", "disable-bias-linear", "add-bias-linear",
                          "qk-layernorm", "num-experts", "moe-router-topk", "moe-ffn-hidden-size", "moe-shared-expert-intermediate-size",
                          "moe-layer-freq", "moe-router-num-groups", "moe-router-group-topk", "add-qkv-bias", "multi-latent-attention",
                          "q-lora-rank", "kv-lora-rank", "qk-head-dim", "qk-pos-emb-head-dim", "v-head-dim", "hybrid-override-pattern", "hybrid-layer-pattern", "experimental-attention-variant", "linear-attention-freq",
                          "linear-num-key-heads", "linear-num-value-heads", "linear-key-head-dim", "linear-value-head-dim", "linear-conv-kernel-dim",
                          "attention-output-gate", "hybrid-attention-ratio", "hybrid-mlp-ratio", "is-hybrid-model",
                          "mamba-head-dim", "mamba-num-heads", "mamba-state-dim", "mamba-num-groups"}) {
      (void)a.has(k);
    }
  }
  Json run = {{"name", "imported from Megatron-LM arguments"}, {"model", model}, {"hardware", opt.hardware}, {"cluster", cluster},
              {"training", training}, {"parallel", parallel}, {"assumptions", assumptions}};
  note_ignored(run, a.unused());
  if (!opt.model.empty()) run["assumptions"].push_back("model: the zoo's " + opt.model + "; the architecture arguments are not read");
  return run;
}

namespace {

// Shared by the TOML and YAML readers.
std::string trim(const std::string& x) {
  const size_t a = x.find_first_not_of(" \t\r"), b = x.find_last_not_of(" \t\r");
  return a == std::string::npos ? std::string() : x.substr(a, b - a + 1);
}

// The line up to its comment: a '#' outside quotes (in YAML only at the start or after a blank).
std::string without_comment(const std::string& line, bool after_blank) {
  char quote = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#' && (!after_blank || i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t')) {
      return line.substr(0, i);
    }
  }
  return line;
}

// `v` as an integer, else a float; nullopt when it is neither.
std::optional<Json> as_number(const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const long long i = std::strtoll(v.c_str(), &end, 10);
  if (!v.empty() && end != nullptr && *end == '\0' && errno == 0) return Json(static_cast<int64_t>(i));
  const double d = std::strtod(v.c_str(), &end);
  if (!v.empty() && end != nullptr && *end == '\0') return Json(d);
  return std::nullopt;
}

// One TOML value from `v` (comment removed): string, boolean, number or array.
Json toml_value(std::string v, const std::string& where) {
  v = trim(v);
  if (v.empty()) throw core::UserError(where + ": a key without a value");
  if (v.front() == '"' || v.front() == '\'') {
    if (v.size() < 2 || v.back() != v.front()) throw core::UserError(where + ": unclosed string " + v);
    return v.substr(1, v.size() - 2);
  }
  if (v == "true" || v == "false") return v == "true";
  if (v.front() == '[') {
    if (v.back() != ']') throw core::UserError(where + ": unclosed array " + v);
    Json arr = Json::array();
    std::string inner = v.substr(1, v.size() - 2), cur;
    char quote = 0;
    int depth = 0;
    for (char c : inner) {
      if (quote != 0) {
        cur += c;
        if (c == quote) quote = 0;
      } else if (c == '"' || c == '\'') {
        quote = c;
        cur += c;
      } else if (c == '[') {
        ++depth;
        cur += c;
      } else if (c == ']') {
        --depth;
        cur += c;
      } else if (c == ',' && depth == 0) {
        if (!trim(cur).empty()) arr.push_back(toml_value(cur, where));
        cur.clear();
      } else {
        cur += c;
      }
    }
    if (!trim(cur).empty()) arr.push_back(toml_value(cur, where));
    return arr;
  }
  std::string num;
  for (char c : v) {
    if (c != '_') num += c;
  }
  if (auto n = as_number(num)) return *n;
  throw core::UserError(where + ": got " + v + "; expected a string, a number, true, false or an array");
}

// One YAML scalar: null, a quoted string, a boolean, a number or a plain string.
Json yaml_scalar(std::string v) {
  v = trim(v);
  if (v.empty() || v == "null" || v == "~") return nullptr;
  if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front()) return v.substr(1, v.size() - 2);
  std::string l = v;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (l == "true" || l == "yes") return true;
  if (l == "false" || l == "no") return false;
  if (auto n = as_number(v)) return *n;
  return v;
}

}  // namespace

Json parse_toml(const std::string& text, const std::string& path) {
  Json doc = Json::object();
  Json* table = &doc;
  std::string pending, pending_key;
  int line_no = 0, pending_line = 0;
  auto balance = [](const std::string& v) {
    int depth = 0;
    char quote = 0;
    for (char c : v) {
      if (quote != 0) {
        if (c == quote) quote = 0;
      } else if (c == '"' || c == '\'') {
        quote = c;
      } else if (c == '[') {
        ++depth;
      } else if (c == ']') {
        --depth;
      }
    }
    return depth;
  };
  size_t start = 0;
  while (start <= text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    std::string line = without_comment(text.substr(start, nl - start), false);
    start = nl + 1;
    ++line_no;
    const std::string where = path + ":" + std::to_string(pending.empty() ? line_no : pending_line);
    if (!pending.empty()) {  // an array spanning lines
      pending += " " + line;
      if (balance(pending) > 0) continue;
      (*table)[pending_key] = toml_value(pending, where);
      pending.clear();
      continue;
    }
    const size_t a = line.find_first_not_of(" \t\r");
    if (a == std::string::npos) continue;
    line = line.substr(a);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r')) line.pop_back();
    if (line.front() == '[') {
      if (line.rfind("[[", 0) == 0 || line.back() != ']') throw core::UserError(where + ": " + line + ": expected a [table] header");
      table = &doc;
      std::string name = line.substr(1, line.size() - 2), part;
      std::stringstream parts(name);
      while (std::getline(parts, part, '.')) {
        const size_t b = part.find_first_not_of(' '), e = part.find_last_not_of(' ');
        if (b == std::string::npos) throw core::UserError(where + ": " + line + ": an empty table name");
        Json& next = (*table)[part.substr(b, e - b + 1)];
        if (next.is_null()) next = Json::object();
        if (!next.is_object()) throw core::UserError(where + ": " + line + ": names a value, not a table");
        table = &next;
      }
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos) throw core::UserError(where + ": " + line + ": expected key = value");
    std::string key = line.substr(0, eq);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    if (key.size() >= 2 && (key.front() == '"' || key.front() == '\'')) key = key.substr(1, key.size() - 2);
    const std::string value = line.substr(eq + 1);
    if (balance(value) > 0) {
      pending = value;
      pending_key = key;
      pending_line = line_no;
      continue;
    }
    (*table)[key] = toml_value(value, where);
  }
  if (!pending.empty()) throw core::UserError(path + ":" + std::to_string(pending_line) + ": an array is not closed");
  return doc;
}

Json parse_yaml(const std::string& text, const std::string& path) {
  struct Level {
    int indent;
    Json* node;
  };
  Json doc = Json::object();
  std::vector<Level> stack{{0, &doc}};
  std::stringstream in(text);
  std::string raw;
  int line_no = 0;
  Json* pending = nullptr;  // a "key:" whose mapping or list follows on deeper lines
  int pending_indent = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    const std::string where = path + ":" + std::to_string(line_no);
    const std::string line = without_comment(raw, true);
    const size_t first = line.find_first_not_of(' ');
    if (first == std::string::npos || line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (line[first] == '\t') throw core::UserError(where + ": YAML indents with spaces, not tabs");
    if (line_no == 1 && line.compare(first, 3, "---") == 0) continue;
    const int indent = static_cast<int>(first);
    std::string body = line.substr(first);
    while (!body.empty() && (body.back() == ' ' || body.back() == '\r')) body.pop_back();
    if (pending != nullptr) {
      if (indent > pending_indent) {
        *pending = body.rfind("- ", 0) == 0 || body == "-" ? Json::array() : Json::object();
        stack.push_back({indent, pending});
      }
      pending = nullptr;
    }
    while (stack.size() > 1 && indent < stack.back().indent) stack.pop_back();
    if (indent != stack.back().indent) throw core::UserError(where + ": the indentation does not match an enclosing block");
    Json& node = *stack.back().node;
    if (body.rfind("- ", 0) == 0 || body == "-") {
      if (!node.is_array()) throw core::UserError(where + ": a list item where a mapping entry was expected");
      const std::string item = body.size() > 2 ? body.substr(2) : "";
      if (item.find(": ") != std::string::npos) throw core::UserError(where + ": lists of mappings are not read; give scalars");
      node.push_back(yaml_scalar(item));
      continue;
    }
    if (node.is_array()) throw core::UserError(where + ": a mapping entry inside a list");
    const size_t colon = body.find(':');
    if (colon == std::string::npos || (colon + 1 < body.size() && body[colon + 1] != ' ')) {
      throw core::UserError(where + ": " + body + ": expected key: value");
    }
    std::string key = body.substr(0, colon);
    if (key.size() >= 2 && (key.front() == '"' || key.front() == '\'') && key.back() == key.front()) key = key.substr(1, key.size() - 2);
    const std::string value = colon + 2 <= body.size() ? body.substr(std::min(body.size(), colon + 2)) : "";
    if (value.find_first_not_of(' ') == std::string::npos) {
      node[key] = nullptr;  // stays null unless a deeper block follows
      pending = &node[key];
      pending_indent = indent;
      continue;
    }
    if (value.front() == '[' && value.back() == ']' && value.find_first_of("[]{}", 1) == value.size() - 1) {
      // A one-line list of scalars ("[]", "[a, b]").
      Json list = Json::array();
      std::stringstream items(value.substr(1, value.size() - 2));
      std::string item;
      while (std::getline(items, item, ',')) {
        if (item.find_first_not_of(' ') != std::string::npos) list.push_back(yaml_scalar(item));
      }
      node[key] = list;
      continue;
    }
    if (value == "{}") {
      node[key] = Json::object();
      continue;
    }
    if (value.front() == '{' || value.front() == '[' || value.front() == '&' || value.front() == '*' || value.front() == '|' || value.front() == '>') {
      throw core::UserError(where + ": " + key + ": nested flow collections, anchors and block scalars are not read");
    }
    node[key] = yaml_scalar(value);
  }
  return doc;
}

void deepspeed_pipeline_engine(Json& parallel, double grad_bytes, std::vector<std::string>& notes) {
  parallel["pp_rendezvous"] = true;
  parallel["pp_send_full_activation"] = true;
  parallel["keep_stage_outputs"] = true;
  // The engine's ReduceGrads instruction after the schedule, over MEMORY_OPT_ALLREDUCE_SIZE.
  parallel["grad_reduce_overlap"] = false;
  parallel["bucket_mb"] = 5e8 * grad_bytes / 1e6;
  notes.push_back("parallel: DeepSpeed's pipeline engine: 1F1B with blocking send/receive pairs (both stages wait for each transfer; a "
                  "backward's gradient is sent after the next forward's input is received) of whole activations from every TP rank, "
                  "every in-flight stage output kept in its buffers, gradients reduced after the last micro-batch's backward in "
                  "flattened buckets of 5e8 elements (MEMORY_OPT_ALLREDUCE_SIZE), " + core::fmt("%g", 5e8 * grad_bytes / 1e6) + " MB");
}

namespace {

bool is_auto(const Json& j) { return j.is_string() && j.get<std::string>() == "auto"; }

}  // namespace

const char* const kSdpaAttention =
    "training: FlashAttention-2 class attention kernels (Hugging Face models call PyTorch SDPA, their default attn_implementation, "
    "or flash-attn 2; Megatron-DeepSpeed --use-flash-attn-v2); training.attention sets another";

namespace {

// A DeepSpeed config value: a number (DeepSpeed also takes numbers written as strings), or
// "auto", which the Hugging Face Trainer fills in: `fill` when the caller has it (0: not).
double ds_number(const Json& j, const std::string& path, double lo, double hi, double fill = 0, const char* option = nullptr) {
  double v = 0;
  if (j.is_number()) {
    v = j.get<double>();
  } else if (is_auto(j)) {
    if (fill <= 0) {
      throw core::UserError(path + ": \"auto\" is filled in by the Hugging Face Trainer; give the number" +
                            (option != nullptr ? std::string(" or ") + option : std::string()));
    }
    v = fill;
  } else if (j.is_string()) {
    char* end = nullptr;
    v = std::strtod(j.get<std::string>().c_str(), &end);
    if (end == nullptr || *end != '\0' || j.get<std::string>().empty()) throw core::UserError(path + ": got " + j.dump() + "; expected a number");
  } else {
    throw core::UserError(path + ": got " + j.dump() + "; expected a number");
  }
  if (!(v >= lo && v <= hi)) throw core::UserError(path + ": got " + j.dump() + "; expected " + core::fmt("%g", lo) + " to " + core::fmt("%g", hi));
  return v;
}

// bf16.enabled / fp16.enabled; "auto" follows --precision, as the Trainer follows its flags.
bool ds_enabled(const Json& c, const char* key, const std::string& precision) {
  if (!c.contains(key) || !c[key].is_object() || !c[key].contains("enabled")) return false;
  const Json& e = c[key]["enabled"];
  if (e.is_boolean()) return e.get<bool>();
  if (is_auto(e)) {
    if (precision.empty()) throw core::UserError(std::string(key) + ".enabled: \"auto\" is filled in by the Hugging Face Trainer; give true / false or --precision");
    return precision == key;
  }
  throw core::UserError(std::string(key) + ".enabled: got " + e.dump() + "; expected true or false");
}

// An offload block's device: none (or absent), cpu; nvme is not modelled.
bool ds_offloaded(const Json& zero, const char* key) {
  if (!zero.contains(key) || zero[key].is_null()) return false;
  const std::string path = std::string("zero_optimization.") + key;
  if (!zero[key].is_object()) throw core::UserError(path + ": got " + zero[key].dump() + "; expected an object with a device");
  const std::string dev = zero[key].value("device", std::string("none"));
  if (dev == "none") return false;
  if (dev == "cpu") return true;
  if (dev == "nvme") throw core::UserError(path + ".device: \"nvme\" (ZeRO-Infinity) is not modelled; stepcast models \"cpu\" offload");
  throw core::UserError(path + ".device: got \"" + dev + "\"; expected none, cpu or nvme");
}

}  // namespace

Json import_deepspeed(const Json& c, const std::string& config_path, const ImportOptions& opt) {
  if (!c.is_object()) throw core::UserError(config_path + ": expected a DeepSpeed config object");
  if (opt.model.empty() && opt.model_json.is_null()) {
    throw core::UserError("--model: required (a DeepSpeed config does not describe the model): a zoo name or a model config file");
  }
  if (opt.seq_len <= 0) throw core::UserError("--seq: required (a DeepSpeed config does not hold the sequence length)");
  if (opt.gpus <= 0) throw core::UserError("--gpus: required (the DeepSpeed config does not say how many GPUs run it)");
  std::vector<std::string> assumptions, ignored;
  std::set<std::string> read;
  auto get = [&](const char* key) -> const Json* {
    read.insert(key);
    return c.contains(key) && !c[key].is_null() ? &c[key] : nullptr;
  };
  const int64_t dp = opt.gpus;
  // The model: a zoo name, or a config file.
  const Json model = opt.model_json.is_null() ? model_reference(opt.model) : opt.model_json;
  // Batch: any two of the three determine the third (train = micro x accumulation x dp).
  const Json* tb = get("train_batch_size");
  const Json* mb = get("train_micro_batch_size_per_gpu");
  const Json* ga = get("gradient_accumulation_steps");
  if (ga != nullptr && is_auto(*ga) && opt.grad_accum <= 0) {
    assumptions.push_back("training: gradient_accumulation_steps \"auto\" = 1 (the Hugging Face Trainer's default; --grad-accum sets it)");
  }
  int64_t mbs = mb ? static_cast<int64_t>(ds_number(*mb, "train_micro_batch_size_per_gpu", 1, 1e9, static_cast<double>(opt.micro_batch), "--micro-batch")) : 0;
  int64_t gas = ga ? static_cast<int64_t>(ds_number(*ga, "gradient_accumulation_steps", 1, 1e9, opt.grad_accum > 0 ? static_cast<double>(opt.grad_accum) : 1.0)) : 0;
  // "auto" here is micro-batch x accumulation x GPUs: derived below.
  int64_t gbs = tb && !is_auto(*tb) ? static_cast<int64_t>(ds_number(*tb, "train_batch_size", 1, 1e12)) : 0;
  if (gbs == 0 && mbs > 0) gbs = mbs * std::max<int64_t>(1, gas) * dp;
  if (mbs == 0 && gbs > 0) mbs = gbs / (std::max<int64_t>(1, gas) * dp);
  if (gbs == 0 || mbs == 0) throw core::UserError(config_path + ": train_batch_size or train_micro_batch_size_per_gpu: give at least one");
  if (gas == 0) gas = gbs / (mbs * dp);
  if (mbs * gas * dp != gbs) {
    throw core::UserError("train_batch_size: " + std::to_string(gbs) + " is not train_micro_batch_size_per_gpu x gradient_accumulation_steps x GPUs = " +
                          std::to_string(mbs) + " x " + std::to_string(gas) + " x " + std::to_string(dp));
  }
  // Precision.
  read.insert("bf16");
  read.insert("fp16");
  const bool bf16 = ds_enabled(c, "bf16", opt.precision), fp16 = ds_enabled(c, "fp16", opt.precision);
  if (bf16 && fp16) throw core::UserError("bf16.enabled and fp16.enabled: both true; DeepSpeed takes one");
  const std::string precision = bf16 ? "bf16" : fp16 ? "fp16" : "fp32";
  if (!bf16 && !fp16) assumptions.push_back("training: fp32 (neither bf16 nor fp16 is enabled)");
  Json training = {{"seq_len", opt.seq_len}, {"global_batch_size", gbs}, {"precision", precision}, {"attention", "flash2"}};
  assumptions.push_back(kSdpaAttention);
  std::string optimizer = "adam";
  if (const Json* o = get("optimizer"); o != nullptr && o->is_object() && o->contains("type")) {
    std::string t = (*o)["type"].is_string() ? (*o)["type"].get<std::string>() : "";
    std::transform(t.begin(), t.end(), t.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    if (t == "sgd") {
      optimizer = "sgd";
    } else if (t.find("adam") == std::string::npos && t.find("lamb") == std::string::npos) {
      throw core::UserError("optimizer.type: got " + (*o)["type"].dump() + "; stepcast models Adam-like (Adam, AdamW, OneBitAdam, Lamb) and SGD optimizers");
    }
  }
  training["optimizer"] = optimizer;
  // ZeRO.
  Json parallel = {{"dp", dp}, {"micro_batch_size", mbs}};
  const Json* zp = get("zero_optimization");
  const Json zero = zp != nullptr ? *zp : Json::object();
  if (!zero.is_object()) throw core::UserError("zero_optimization: got " + zero.dump() + "; expected an object");
  const int stage = zero.contains("stage") ? static_cast<int>(ds_number(zero["stage"], "zero_optimization.stage", 0, 3)) : 0;
  parallel["zero_stage"] = stage;
  const bool off_opt = ds_offloaded(zero, "offload_optimizer"), off_param = ds_offloaded(zero, "offload_param");
  if (off_param && stage < 3) throw core::UserError("zero_optimization.offload_param: needs stage 3 (got stage " + std::to_string(stage) + ")");
  if (off_param) {
    parallel["offload"] = "params";
  } else if (off_opt) {
    parallel["offload"] = "optimizer";
  }
  if (zero.contains("overlap_comm") && !zero["overlap_comm"].is_boolean()) {
    throw core::UserError("zero_optimization.overlap_comm: got " + zero["overlap_comm"].dump() + "; expected true or false");
  }
  const bool overlap = zero.contains("overlap_comm") ? zero["overlap_comm"].get<bool>() : stage == 3;
  parallel["grad_reduce_overlap"] = overlap;
  if (!zero.contains("overlap_comm")) {
    assumptions.push_back(std::string("parallel: gradient reduction ") + (overlap ? "overlapped with the backward" : "after the backward") +
                          " (DeepSpeed's overlap_comm default for stage " + std::to_string(stage) + ")");
  }
  const double grad_bytes = precision == "fp32" ? 4.0 : 2.0;
  const bool bf16_optimizer = bf16 && stage == 1 && !off_opt;
  deepspeed_gradients(bf16_optimizer, "bf16, ZeRO-1, no offload", precision, training, assumptions);
  if (stage >= 1 && stage <= 2) {
    parallel["param_gather_overlap"] = false;
    assumptions.push_back("parallel: DeepSpeed ZeRO-1/2 all-gathers the updated parameter partitions inside the optimizer step");
  }
  if (stage <= 2 && dp > 1) {
    double elements = 5e8;
    if (zero.contains("reduce_bucket_size") && is_auto(zero["reduce_bucket_size"])) {
      // The Trainer's fill: hidden_size x hidden_size.
      core::Issues issues;
      const auto m = model::parse_model(model, "--model", issues, "");
      issues.throw_if_any();
      elements = static_cast<double>(m.hidden) * static_cast<double>(m.hidden);
      assumptions.push_back("parallel: reduce_bucket_size \"auto\" = hidden^2 = " + core::fmt("%.0f", elements) + " elements (the Hugging Face Trainer's fill)");
    } else if (zero.contains("reduce_bucket_size")) {
      elements = ds_number(zero["reduce_bucket_size"], "zero_optimization.reduce_bucket_size", 1, 1e13);
    }
    parallel["bucket_mb"] = std::min(1e6, elements * (bf16_optimizer ? 4.0 : grad_bytes) / 1e6);
    if (!zero.contains("reduce_bucket_size")) assumptions.push_back("parallel: gradient buckets of 5e8 elements (DeepSpeed's reduce_bucket_size default)");
  }
  std::string recompute = opt.recompute.empty() ? "none" : opt.recompute;
  parallel["recompute"] = recompute;
  if (opt.recompute.empty()) assumptions.push_back("parallel: no activation checkpointing (the model code decides it; --recompute sets it)");
  if (stage == 3 && recompute == "full") {
    parallel["zero3_recompute_regather"] = true;
    assumptions.push_back("parallel: ZeRO-3 releases parameters after each module's forward, so the recomputed forward gathers them again");
  }
  for (const auto& [k, v] : zero.items()) {
    static const std::set<std::string> modelled = {"stage", "offload_optimizer", "offload_param", "overlap_comm", "reduce_bucket_size"};
    if (!modelled.count(k)) ignored.push_back("zero_optimization." + k);
  }
  for (const auto& [k, v] : c.items()) {
    if (!read.count(k)) ignored.push_back(k);
  }
  Json cluster = {{"num_gpus", opt.gpus}};
  if (opt.gpus_per_node > 0) cluster["gpus_per_node"] = opt.gpus_per_node;
  Json run = {{"name", "imported from DeepSpeed config " + std::filesystem::path(config_path).filename().string()},
              {"model", model}, {"hardware", opt.hardware}, {"cluster", cluster}, {"training", training}, {"parallel", parallel},
              {"assumptions", assumptions}};
  note_ignored(run, ignored);
  return run;
}

}  // namespace stepcast::config
