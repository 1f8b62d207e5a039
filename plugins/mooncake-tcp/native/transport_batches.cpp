// Transport: a submitted batch's steps after its peer was found. Each request is checked
// locally (gathered and scattered rows included), the requests are cut into slices striped
// over the peer's lanes, and a same-process batch is copied on a worker.
#include <cstring>

#include "lane.h"
#include "te/slice_plan.h"
#include "transport.h"

namespace tetcp {

std::vector<uint64_t> Transport::check_requests(Batch* b, const uint8_t* ops, const uint64_t* local,
                                                const uint64_t* remote, const BatchExtras& rows) {
  // Local validation: op, length and the local range (any registered region; remote
  // ranges are validated by the target against its own registrations).
  const uint64_t* lengths = b->lengths.data();
  std::vector<uint64_t> plan_lengths(b->n);
  for (size_t i = 0; i < b->n; ++i) {
    int32_t s = te::TE_OK;
    const bool gathered = rows.local_rows && rows.local_pitches && rows.local_rows[i] > 1;
    const bool scattered = rows.remote_rows && rows.remote_pitches && rows.remote_rows[i] > 1;
    if (ops[i] > 1 || ((gathered || scattered) && ops[i] != 1)) s = te::TE_INVALID_ARGUMENT;
    if (s == te::TE_OK && gathered)
      s = check_gather(b, i, local[i], rows.local_rows[i], rows.local_pitches[i]);
    else if (s == te::TE_OK && lengths[i] > 0)
      s = registry_.check(local[i], lengths[i], false);
    if (s == te::TE_OK && scattered)
      s = check_scatter(b, i, remote[i], rows.remote_rows[i], rows.remote_pitches[i]);
    else if (s == te::TE_OK && te::range_overflows(remote[i], lengths[i]))
      s = te::TE_ADDRESS_OUT_OF_RANGE;
    b->statuses[i].store(s, std::memory_order_relaxed);
    plan_lengths[i] = s == te::TE_OK ? lengths[i] : 0;
  }
  return plan_lengths;
}

int32_t Transport::check_gather(Batch* b, size_t i, uint64_t local, uint32_t rows, uint64_t pitch) {
  StridedRows g;
  uint64_t span = 0;
  int32_t s = StridedRows::make(local, b->lengths[i], rows, pitch, &g, &span);
  if (s == te::TE_OK) s = registry_.check(local, span, false);  // the rows' whole span is registered
  if (s == te::TE_OK && devices_.device_of(local) != kHost) s = te::TE_INVALID_ARGUMENT;  // host memory only
  if (s != te::TE_OK) return s;
  if (b->gathers.empty()) b->gathers.resize(b->n);
  b->gathers[i] = g;
  return te::TE_OK;
}

// The remote rows are the target's to check against its registrations; here only their shape.
int32_t Transport::check_scatter(Batch* b, size_t i, uint64_t remote, uint32_t rows, uint64_t pitch) {
  StridedRows g;
  uint64_t span = 0;
  int32_t s = StridedRows::make(remote, b->lengths[i], rows, pitch, &g, &span);
  if (s != te::TE_OK) return s;
  if (b->scatters.empty()) b->scatters.resize(b->n);
  b->scatters[i] = g;
  return te::TE_OK;
}

void Transport::plan_batch(Batch* b, const uint8_t* ops, const uint64_t* local, const uint64_t* remote,
                           const std::vector<uint64_t>& plan_lengths, uint32_t lanes) {
  uint64_t slice = opt_.slice_size > kMaxBody ? kMaxBody : opt_.slice_size;
  uint64_t total = 0;
  for (size_t i = 0; i < b->n; ++i) total += plan_lengths[i];
  const uint32_t first = b->peer->next_lane.fetch_add(1);
  // A batch of at most one slice's bytes stays on one lane (the next in turn): one frame and
  // one answer instead of one per lane, and the lanes still share the batches in flight.
  // Striped, four 64 KiB writes took both lanes' threads on both sides for every batch
  // (mooncake-tcp 64 KiB writes, 4 per batch and 4 batches in flight: +11%).
  const bool one_lane = total <= slice;
  auto plan = te::plan_slices(plan_lengths.data(), b->n, slice, one_lane ? 1 : lanes, one_lane ? 0 : first);
  if (one_lane)
    for (auto& p : plan) p.lane = first % lanes;
  b->slices.resize(plan.size());
  for (size_t k = 0; k < plan.size(); ++k) {
    Slice& s = b->slices[k];
    const auto& pl = plan[k];
    s.batch = b;
    s.req = pl.request;
    s.op = ops[pl.request] == 1 ? OP_WRITE : OP_READ;
    s.lane = pl.lane;
    // A gathered write's slices keep the request's first row; their packed offset is remote - span_addr.
    s.local = local[pl.request] + (b->gathers.empty() || !b->gathers[pl.request].gathers() ? pl.offset : 0);
    // A scattered write's `remote` is its packed offset past the first row, not an address;
    // its span runs from the first row's start to the last row's end.
    s.remote = remote[pl.request] + pl.offset;
    s.len = pl.length;
    s.span_addr = remote[pl.request];
    const StridedRows* rows = b->scatter_of(&s);
    s.span_len = rows ? rows->extent(b->lengths[pl.request]) : b->lengths[pl.request];
    s.device = devices_.device_of(s.local);
  }
}

void Transport::queue_on_lanes(Batch* b, uint32_t lanes) {
  // Grouped by lane, each group in plan order (a counting sort), so that every lane takes
  // its lock and wakes its loop once per batch rather than once per slice.
  std::vector<size_t> start(lanes + 1, 0);
  for (const Slice& s : b->slices) ++start[s.lane + 1];
  for (uint32_t l = 0; l < lanes; ++l) start[l + 1] += start[l];
  std::vector<Slice*> grouped(b->slices.size());
  std::vector<size_t> at(start.begin(), start.end() - 1);
  for (Slice& s : b->slices) grouped[at[s.lane]++] = &s;
  for (uint32_t l = 0; l < lanes; ++l) {
    if (start[l + 1] > start[l]) b->peer->lanes[l]->enqueue(grouped.data() + start[l], start[l + 1] - start[l]);
  }
}

void Transport::run_local(std::shared_ptr<Batch> b) {
  for (Slice& s : b->slices) {
    int32_t st = b->cancel_status.load();
    if (st == te::TE_OK && (closing_ || loops_[0]->stopping())) st = te::TE_ABORTED;
    std::string why = "same-process copy refused";
    if (st == te::TE_OK) st = copy_local(*b, s, &why);
    b->complete(&s, st, st ? why.c_str() : nullptr);
  }
}

int32_t Transport::copy_local(const Batch& b, const Slice& s, std::string* why) {
  const StridedRows* from = b.gather_of(&s);
  const StridedRows* into = b.scatter_of(&s);
  const uint64_t packed = Batch::packed_offset(&s);
  uint64_t lo = s.local, hi = s.local + s.len;
  if (from) from->span(packed, s.len, &lo, &hi);
  uint64_t rlo = s.remote, rhi = s.remote + s.len;
  if (into) into->span(packed, s.len, &rlo, &rhi);
  te::Lease ll, rl;
  int32_t st = registry_.acquire(lo, hi - lo, false, ll);
  if (st == te::TE_OK) st = registry_.check(s.span_addr, s.span_len, true);
  if (st == te::TE_OK) st = registry_.acquire(rlo, rhi - rlo, true, rl);
  if (st != te::TE_OK) return st;
  const int remote_device = devices_.device_of(rlo);
  if ((from || into) && (s.device != kHost || remote_device != kHost)) return te::TE_MEMORY_KIND_UNSUPPORTED;
  if (into) {
    // Row by row: each remote row's piece from the packed source (itself gathered or not).
    uint64_t at = packed;
    into->walk(packed, s.len, [&](uint64_t dst, uint64_t take) {
      if (from)
        from->copy_out(at, take, reinterpret_cast<uint8_t*>(dst));
      else
        std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(s.local + (at - packed)), take);
      at += take;
      return true;
    });
    return te::TE_OK;
  }
  if (from) {
    from->copy_out(packed, s.len, reinterpret_cast<uint8_t*>(s.remote));
    return te::TE_OK;
  }
  const uint64_t dst = s.op == OP_WRITE ? s.remote : s.local;
  const uint64_t src = s.op == OP_WRITE ? s.local : s.remote;
  if (s.device == kHost && remote_device == kHost) {
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), s.len);
    return te::TE_OK;
  }
  return copy_any(s.device != kHost ? s.device : remote_device, dst, src, s.len, why);
}

}  // namespace tetcp
