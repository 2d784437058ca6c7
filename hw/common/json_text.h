// The one way tpusim reads a JSON document a user wrote (chip configs, models, sweep specs): every
// way a text can fail to be one JSON value becomes one InputError naming the file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace tpu {

// Documents nest far less; deeper nesting is refused before nlohmann's recursive parser could
// exhaust the stack.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text`, read from `file` (named in messages). Throws InputError for: text that is not
// one JSON value ("not valid JSON" with nlohmann's line and column), a number past a double's
// range (1e400), nesting deeper than kMaxJsonDepth, and a key that appears twice in one object
// (named by its JSON pointer) — nlohmann would keep the last silently, so a hand-edited file
// would run with a value its author did not see.
nlohmann::json parse_json_text(const std::string& text, const std::string& file);

}  // namespace tpu
