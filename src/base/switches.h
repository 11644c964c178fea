// Host-side switches read from the environment (DEEPINFER_*): one parser per kind of value, so
// that every switch rejects a bad value with the same kind of message.
#pragma once

#include <cstdint>

namespace deepinfer {

// A count switch's value: `value` null or empty gives `if_unset`; otherwise it must be a decimal
// count of at most 9 digits, else Error("NAME must be MEANING, got 'VALUE'").
int64_t ParseCountSwitch(const char* name, const char* value, int64_t if_unset, const char* meaning);

// An on/off switch's value: `value` null or empty gives `if_unset`, "1" true, "0" false; anything
// else is Error("NAME must be 0 or 1, got 'VALUE'").
bool ParseOnOffSwitch(const char* name, const char* value, bool if_unset);

}  // namespace deepinfer
