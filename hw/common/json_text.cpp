#include "hw/common/json_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <vector>

#include "hw/common/error.h"

namespace tpu {

namespace {

using nlohmann::json;

int nesting_depth(const std::string& text) {
  int depth = 0, max_depth = 0;
  bool in_str = false, esc = false;
  for (char c : text) {
    if (in_str) {
      if (esc)
        esc = false;
      else if (c == '\\')
        esc = true;
      else if (c == '"')
        in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (c == '{' || c == '[') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return max_depth;
}

// RFC 6901: '~' and '/' inside a key are escaped.
std::string pointer_token(const std::string& key) {
  std::string out;
  for (char c : key)
    out += c == '~' ? std::string("~0") : c == '/' ? std::string("~1") : std::string(1, c);
  return out;
}

// Follows the parser's events to know where it is, so a repeated key can be named by pointer.
class KeyTracker {
 public:
  explicit KeyTracker(const std::string& file) : file_(file) {}

  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        frames_.push_back(Frame{event == json::parse_event_t::object_start, {}, {}, 0});
        break;
      case json::parse_event_t::key: {
        Frame& f = frames_.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second)
          throw InputError(fmt::format("{}: {} appears twice in one object (each key at most once)",
                                       file_, pointer()));
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames_.pop_back();
        element_done();
        break;
      case json::parse_event_t::value: element_done(); break;
    }
    return true;
  }

 private:
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string key;    // objects: the member being parsed
    std::size_t index;  // arrays: the element being parsed
  };

  void element_done() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
  }

  std::string pointer() const {
    std::string p;
    for (const Frame& f : frames_)
      p += "/" + (f.object ? pointer_token(f.key) : std::to_string(f.index));
    return p;
  }

  const std::string& file_;
  std::vector<Frame> frames_;
};

}  // namespace

json parse_json_text(const std::string& text, const std::string& file) {
  if (const int depth = nesting_depth(text); depth > kMaxJsonDepth)
    throw InputError(fmt::format("{}: JSON nested {} levels deep (at most {} allowed)", file, depth,
                                 kMaxJsonDepth));
  try {
    return json::parse(text, KeyTracker(file));
  } catch (const json::exception& e) {
    // parse_error, or out_of_range for a number past a double's range (1e400).
    const std::string what = e.what();
    const auto pos = what.find("parse error");
    throw InputError(fmt::format("{}: not valid JSON: {}", file,
                                 pos == std::string::npos ? what : what.substr(pos)));
  }
}

}  // namespace tpu
