#include "write_fences.h"

namespace te::fabric {

void WriteFences::forget_if_done(std::unordered_map<const Batch*, Entry>::iterator it) {
  // While unresolved the entry stays even when empty: the fence is still queued or posted,
  // and it holds the batch, so its address cannot be reused by another batch meanwhile.
  if (it->second.resolved && it->second.outstanding == 0 && it->second.held.empty()) by_batch_.erase(it);
}

WriteFences::Outcome WriteFences::plain_done(Op* op, const Batch* b, int32_t status) {
  Outcome out;
  auto it = by_batch_.find(b);
  if (it == by_batch_.end()) {
    // Not posted through posted_plain: nothing to wait for.
    out.status = status;
    return out;
  }
  Entry& e = it->second;
  --e.outstanding;
  if (status != 0) {
    out.status = status;  // its own failure is reported as it is
  } else if (e.resolved) {
    out.status = e.status;  // the fence already answered for it
    out.why = e.why;
  } else {
    e.held.push_back(op);
    out.held = true;
  }
  forget_if_done(it);
  return out;
}

void WriteFences::fence_done(const Batch* b, int32_t status, const std::string& why,
                             std::vector<std::pair<Op*, Outcome>>& released) {
  auto it = by_batch_.find(b);
  if (it == by_batch_.end()) return;  // the batch had no plain write on this rail
  Entry& e = it->second;
  e.resolved = true;
  e.status = status;
  e.why = status == 0 ? std::string() : "its delivery was not confirmed: " + why;
  for (Op* op : e.held) released.push_back({op, Outcome{false, e.status, e.why}});
  e.held.clear();
  forget_if_done(it);
}

std::vector<Op*> WriteFences::drain_all() {
  std::vector<Op*> all;
  for (auto& [b, e] : by_batch_)
    for (Op* op : e.held) all.push_back(op);
  by_batch_.clear();
  return all;
}

}  // namespace te::fabric
