// Provider discovery and selection (libfabric builds only).
#pragma once

#include <rdma/fabric.h>

#include <string>
#include <vector>

#include "te/fabric/transport.h"

namespace te::fabric {

/** Capabilities every te_fabric endpoint needs. */
constexpr uint64_t kCaps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_SEND | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE;
/** mr_mode bits te_fabric handles (FI_MR_RAW and FI_MR_HMEM are not handled, so not offered). */
constexpr int kMrModes = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;

uint32_t api_version();
bool is_hardware(const std::string& prov);
bool is_shm(const std::string& prov);
bool is_socket_based(const std::string& prov);
/** Whether a user's provider name ("tcp", "tcp;ofi_rxm", "verbs") matches fi_info's prov_name. */
bool provider_matches(const std::string& wanted, const std::string& prov);

struct Selection {
  std::vector<fi_info*> rails;  // duplicates owned by the caller (fi_freeinfo each)
  std::string provider;
  Status status = TE_OK;
  std::string message;
};

/** Picks the provider and one fi_info per rail: railsPerNic of them per domain (NIC). */
Selection select_rails(const Options& o);

std::string fi_error(int rc);

}  // namespace te::fabric
