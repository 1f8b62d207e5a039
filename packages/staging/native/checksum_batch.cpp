#include "checksum_batch.h"

#include "crc32c.h"
#include "te/hex.h"
#include "te/status.h"

namespace te::staging {

namespace {

bool contiguous(const ChecksumJob& j) {
  return (j.rows == 1 || j.pitch == j.width) && (j.reps == 1 || j.rep_stride == j.width * j.rows);
}

/** Strided (not one range) jobs of the same shape that read something. */
bool strided_alike(const ChecksumJob& a, const ChecksumJob& b, const ChecksumJob& c) {
  auto same = [&a](const ChecksumJob& x) {
    return x.width == a.width && x.rows == a.rows && x.pitch == a.pitch && x.reps == a.reps &&
           x.rep_stride == a.rep_stride;
  };
  return a.bytes() > 0 && !contiguous(a) && same(b) && same(c);
}

/** A piece of work: job `job`'s bytes [offset, offset + length) when it is contiguous, else the whole job (length 0).
 */
struct Part {
  size_t job;
  uint64_t offset;
  uint64_t length;
  uint64_t bytes;
};

}  // namespace

int32_t check_checksum_jobs(const std::vector<ChecksumJob>& jobs, const std::vector<Region>& regions,
                            std::string& message) {
  for (size_t i = 0; i < jobs.size(); i++) {
    const ChecksumJob& j = jobs[i];
    if (j.width == 0 || j.rows == 0 || j.reps == 0) continue;  // reads nothing: the CRC of no bytes
    uint64_t span = 0;
    if (!strided_span(j.width, j.rows, j.pitch, j.reps, j.rep_stride, span) || j.addr > UINT64_MAX - span) {
      message = "checksum " + std::to_string(i) + ": its extent overflows 64 bits";
      return TE_INVALID_ARGUMENT;
    }
    if (!inside_regions(regions, j.addr, j.addr + span)) {
      message = "checksum " + std::to_string(i) + ": [" + te::hex(j.addr) + ", +" + std::to_string(span) +
                ") is outside the registered buffers";
      return TE_ADDRESS_OUT_OF_RANGE;
    }
  }
  return TE_OK;
}

uint32_t checksum_job(const ChecksumJob& j) {
  if (j.width == 0 || j.rows == 0 || j.reps == 0) return 0;
  if (contiguous(j)) return crc32c(0, reinterpret_cast<const void*>(j.addr), j.bytes());
  uint32_t crc = 0;
  for (uint64_t r = 0; r < j.reps; r++) {
    const uint64_t base = j.addr + r * j.rep_stride;
    if (j.rows == 1 || j.pitch == j.width) {
      crc = crc32c(crc, reinterpret_cast<const void*>(base), j.width * j.rows);
      continue;
    }
    for (uint64_t i = 0; i < j.rows; i++) crc = crc32c(crc, reinterpret_cast<const void*>(base + i * j.pitch), j.width);
  }
  return crc;
}

std::vector<uint32_t> checksum_jobs(CopyPool& pool, const std::vector<ChecksumJob>& jobs, uint64_t split) {
  std::vector<uint32_t> out(jobs.size(), 0);
  if (jobs.empty()) return out;
  if (split == 0) split = 1;
  std::vector<Part> parts;
  parts.reserve(jobs.size());
  uint64_t total = 0;
  bool cut = false;
  for (size_t k = 0; k < jobs.size(); k++) {
    const ChecksumJob& j = jobs[k];
    const uint64_t bytes = j.bytes();
    total += bytes;
    if (bytes > split && contiguous(j)) {
      cut = true;
      for (uint64_t o = 0; o < bytes; o += split)
        parts.push_back({k, o, bytes - o < split ? bytes - o : split, bytes - o < split ? bytes - o : split});
    } else {
      parts.push_back({k, 0, 0, bytes});
    }
  }
  std::vector<uint32_t> crcs(parts.size(), 0);
  // Parts split into contiguous shares of about equal bytes, one per thread.
  const size_t shares = pool.threads();
  std::vector<size_t> bounds{0};
  const uint64_t share = total / shares + 1;
  uint64_t acc = 0;
  for (size_t i = 0; i < parts.size(); i++) {
    acc += parts[i].bytes;
    if (acc >= share * bounds.size() && bounds.size() < shares && i + 1 < parts.size()) bounds.push_back(i + 1);
  }
  bounds.push_back(parts.size());
  const Part* p = parts.data();
  const ChecksumJob* js = jobs.data();
  uint32_t* c = crcs.data();
  pool.run_parts(bounds, [p, js, c](size_t begin, size_t end) {
    for (size_t i = begin; i < end;) {
      const Part& part = p[i];
      if (part.length > 0) {
        c[i] = crc32c(0, reinterpret_cast<const void*>(js[part.job].addr + part.offset), part.length);
        i++;
        continue;
      }
      // Three strided jobs of one shape (a head slice of three pages): walked in lockstep.
      if (i + 3 <= end && p[i + 1].length == 0 && p[i + 2].length == 0 &&
          strided_alike(js[part.job], js[p[i + 1].job], js[p[i + 2].job])) {
        const ChecksumJob& j = js[part.job];
        const uint8_t* base[3] = {reinterpret_cast<const uint8_t*>(j.addr),
                                  reinterpret_cast<const uint8_t*>(js[p[i + 1].job].addr),
                                  reinterpret_cast<const uint8_t*>(js[p[i + 2].job].addr)};
        crc32c_strided3(base, j.width, j.rows, j.pitch, j.reps, j.rep_stride, c + i);
        i += 3;
        continue;
      }
      c[i] = checksum_job(js[part.job]);
      i++;
    }
  });
  if (!cut) return crcs;
  // Parts of one job are consecutive and in order: fold them into the job's CRC.
  for (size_t i = 0; i < parts.size(); i++) {
    const Part& part = parts[i];
    out[part.job] = part.offset == 0 ? crcs[i] : crc32c_combine(out[part.job], crcs[i], part.length);
  }
  return out;
}

}  // namespace te::staging
