#include "recipe/conversation.h"

namespace deepinfer::recipe {

const char* RoleName(Role role) {
  switch (role) {
    case Role::kSystem: return "system";
    case Role::kUser: return "user";
    case Role::kAssistant: return "assistant";
    case Role::kTool: return "tool";
    case Role::kDeveloper: return "developer";
    case Role::kLatestReminder: return "latest_reminder";
  }
  return "?";
}

}  // namespace deepinfer::recipe
