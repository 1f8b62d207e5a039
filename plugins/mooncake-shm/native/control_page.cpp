// memfd-backed control pages (see control_page.h).
#include "control_page.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace teshm {

static std::string sys_error(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

te::Status create_control_page(int* fd, ControlPage** page, std::string* err) {
  int f = memfd_create("te-shm-control", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (f < 0) {
    *err = sys_error("memfd_create");
    return te::TE_INTERNAL;
  }
  if (ftruncate(f, kControlPageSize) != 0 || fcntl(f, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    *err = sys_error("sealing the control page");
    close(f);
    return te::TE_INTERNAL;
  }
  void* p = mmap(nullptr, kControlPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
  if (p == MAP_FAILED) {
    *err = sys_error("mmap of the control page");
    close(f);
    return te::TE_INTERNAL;
  }
  auto* c = static_cast<ControlPage*>(p);
  c->magic = kControlMagic;  // the rest of a fresh memfd is zero: not revoked, nobody busy
  *fd = f;
  *page = c;
  return te::TE_OK;
}

te::Status map_control_page(int fd, ControlPage** page, std::string* err) {
  struct stat st;
  int seals = fcntl(fd, F_GET_SEALS);
  if (fstat(fd, &st) != 0 || seals < 0 || !S_ISREG(st.st_mode) || st.st_size != static_cast<off_t>(kControlPageSize) ||
      (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
    *err = "the control page is not a sealed one-page memfd";
    return te::TE_BAD_FRAME;
  }
  void* p = mmap(nullptr, kControlPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    *err = sys_error("mmap of the peer's control page");
    return te::TE_INTERNAL;
  }
  *page = static_cast<ControlPage*>(p);
  return te::TE_OK;
}

void unmap_control_page(ControlPage* page) {
  if (page) munmap(page, kControlPageSize);
}

}  // namespace teshm
