#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>
#include <thread>

#include "select.h"

namespace te::fabric {

namespace {

const char* kInstall =
    "On RDMA hardware install libfabric with its verbs/efa providers (Debian: apt-get install -y libfabric1 "
    "libfabric-bin rdma-core ibverbs-providers; check with `fi_info -c FI_RMA -t FI_EP_RDM`). Without a NIC, "
    "libfabric's software providers run the same code path: FI_PROVIDER='tcp;ofi_rxm' or FI_PROVIDER=sockets";

int rank(const std::string& prov) {
  static const char* order[] = {"verbs;ofi_rxm", "efa",  "verbs",       "psm3", "cxi",
                                "opx",           "psm2", "tcp;ofi_rxm", "tcp",  "sockets"};
  for (size_t i = 0; i < sizeof order / sizeof order[0]; ++i)
    if (prov == order[i]) return static_cast<int>(i);
  return 100;
}

fi_info* make_hints(const Options& o, const std::string& prov) {
  fi_info* h = fi_allocinfo();
  h->caps = kCaps;
  h->mode = FI_CONTEXT | FI_CONTEXT2;
  h->ep_attr->type = FI_EP_RDM;
  h->domain_attr->mr_mode = kMrModes;
  h->domain_attr->threading = FI_THREAD_SAFE;
  h->domain_attr->control_progress = FI_PROGRESS_UNSPEC;
  h->domain_attr->data_progress = FI_PROGRESS_UNSPEC;
  h->tx_attr->msg_order = FI_ORDER_SAS;
  if (!prov.empty()) h->fabric_attr->prov_name = strdup(prov.c_str());
  return h;
}

std::string env_provider() {
  const char* e = getenv("FI_PROVIDER");
  return e ? e : "";
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "(none)" : s;
}

std::vector<std::string> all_providers() {
  std::set<std::string> names;
  fi_info* list = nullptr;
  if (fi_getinfo(api_version(), nullptr, nullptr, 0, nullptr, &list) == 0) {
    for (fi_info* i = list; i; i = i->next)
      if (i->fabric_attr && i->fabric_attr->prov_name) names.insert(i->fabric_attr->prov_name);
    fi_freeinfo(list);
  }
  return {names.begin(), names.end()};
}

}  // namespace

uint32_t api_version() { return FI_VERSION(1, 9); }

std::string fi_error(int rc) {
  const char* s = fi_strerror(rc < 0 ? -rc : rc);
  return std::string(s ? s : "unknown error") + " (" + std::to_string(rc) + ")";
}

bool is_hardware(const std::string& prov) {
  for (const char* h : {"verbs", "efa", "psm2", "psm3", "cxi", "opx", "usnic"})
    if (prov.find(h) != std::string::npos) return true;
  return false;
}
bool is_shm(const std::string& prov) { return prov == "shm" || prov == "sm2" || prov.rfind("shm;", 0) == 0; }
bool is_socket_based(const std::string& prov) {
  return prov == "sockets" || prov == "tcp" || prov == "tcp;ofi_rxm" || prov == "udp;ofi_rxd";
}
bool provider_matches(const std::string& wanted, const std::string& prov) {
  if (wanted == prov) return true;
  auto semi = prov.find(';');
  return semi != std::string::npos && prov.substr(0, semi) == wanted;
}

static int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  const unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

static int rails_per_nic(const Options& o, const std::string& provider) {
  if (o.rails_per_nic > 0) return o.rails_per_nic;
  if (!is_socket_based(provider)) return 1;
  const int cpus = o.cpus > 0 ? std::min(o.cpus, usable_cpus()) : usable_cpus();
  return std::clamp(cpus / 4, 1, 4);
}

// Provider names offering RDM + RMA + MSG with mr_mode bits we handle, each once, in list order.
static std::vector<std::string> rma_providers(const fi_info* list) {
  std::vector<std::string> rma;
  for (const fi_info* i = list; i; i = i->next)
    if (std::find(rma.begin(), rma.end(), i->fabric_attr->prov_name) == rma.end())
      rma.push_back(i->fabric_attr->prov_name);
  return rma;
}

// What FI_PROVIDER hides, for the messages that list the providers found.
static std::string provider_filter() {
  std::string fip = env_provider();
  return fip.empty() ? "" : " (FI_PROVIDER=" + fip + " limits what libfabric reports)";
}

// The RMA-capable provider the `provider` option names, or "" with the reason in `sel`.
static std::string named_provider(const Options& o, const std::vector<std::string>& rma, Selection* sel) {
  for (auto& p : rma)
    if (provider_matches(o.provider, p)) return p;
  sel->status = TE_PROVIDER_UNAVAILABLE;
  sel->message = "libfabric provider \"" + o.provider +
                 "\" (asked by the `provider` option) offers no RDM endpoint with FI_RMA+FI_MSG here" +
                 provider_filter() + "; RMA-capable providers found: " + join(rma) +
                 "; all providers found: " + join(all_providers()) + ". " + kInstall;
  return "";
}

// The best ranked RMA-capable provider (never shm), or "" with the reason in `sel`.
static std::string best_provider(const std::vector<std::string>& rma, Selection* sel) {
  std::vector<std::string> usable;
  for (auto& p : rma)
    if (!is_shm(p) && rank(p) < 100) usable.push_back(p);
  std::sort(usable.begin(), usable.end(), [](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
  if (!usable.empty()) return usable[0];
  sel->status = TE_PROVIDER_UNAVAILABLE;
  sel->message =
      "no RDMA-capable libfabric provider: none offers RDM endpoints with FI_RMA+FI_MSG" + provider_filter() +
      "; RMA-capable providers found: " + join(rma) +
      (std::any_of(rma.begin(), rma.end(), is_shm) ? " (shm is never chosen automatically: it checks neither keys "
                                                     "nor bounds; name it with provider=shm and allowShm)"
                                                   : "") +
      "; all providers found: " + join(all_providers()) + ". " + kInstall;
  return "";
}

// The provider to use, named or the best found; "" with the reason in `sel` when none may be.
static std::string choose_provider(const Options& o, const std::vector<std::string>& rma, Selection* sel) {
  std::string chosen = o.provider.empty() ? best_provider(rma, sel) : named_provider(o, rma, sel);
  if (!chosen.empty() && is_shm(chosen) && !o.allow_shm) {
    sel->status = TE_PROVIDER_UNAVAILABLE;
    sel->message =
        "the shm provider was asked for, but it checks neither memory keys nor bounds (a peer can write outside "
        "registered memory); set allowShm" +
        (o.env_prefix.empty() ? std::string() : " (" + o.env_prefix + "_ALLOW_SHM=1)") +
        " only when every peer is trusted";
    chosen.clear();
  }
  return chosen;
}

// One entry of `list` per domain (`*domains` gets their names): for socket providers the
// IPv4 entries only.
static std::vector<fi_info*> one_per_domain(fi_info* list, const std::string& chosen,
                                            std::vector<std::string>* domains) {
  std::vector<fi_info*> picked;
  // Prefer IPv4 entries (one per domain), then everything else.
  for (int pass = 0; pass < 2; ++pass) {
    for (fi_info* i = list; i; i = i->next) {
      std::string d = i->domain_attr->name ? i->domain_attr->name : "";
      bool v4 = i->addr_format == FI_SOCKADDR_IN;
      if ((pass == 0) != v4 && is_socket_based(chosen)) continue;
      if (pass == 1 && !is_socket_based(chosen)) continue;
      if (std::find(domains->begin(), domains->end(), d) != domains->end()) continue;
      domains->push_back(d);
      picked.push_back(i);
    }
  }
  return picked;
}

// The rails (copies the caller frees) on the picked domains that the NIC filter and
// maxRails allow, each NIC repeated rails_per_nic times. `node`: bound to a source address.
static std::vector<fi_info*> rails_on(const Options& o, const std::string& chosen, bool node,
                                      const std::vector<fi_info*>& picked, const std::vector<std::string>& domains) {
  std::vector<fi_info*> rails;
  for (size_t k = 0; k < picked.size(); ++k) {
    const std::string& d = domains[k];
    if (!o.nics.empty() && std::find(o.nics.begin(), o.nics.end(), d) == o.nics.end()) continue;
    // A wildcard bind on socket providers: loopback is unreachable from other hosts.
    if (o.nics.empty() && is_socket_based(chosen) && !node && d == "lo" && picked.size() > 1) continue;
    if (static_cast<int>(rails.size()) >= o.max_rails) break;
    rails.push_back(fi_dupinfo(picked[k]));
  }
  // Several endpoints on one NIC, each a rail with its own thread: where the provider's
  // progress is CPU work (sockets), one thread is the limit, not the NIC.
  const int per_nic = rails_per_nic(o, chosen);
  if (per_nic > 1) {
    std::vector<fi_info*> spread;
    for (fi_info* r : rails) {
      spread.push_back(r);
      for (int k = 1; k < per_nic; ++k) spread.push_back(fi_dupinfo(r));
    }
    rails.swap(spread);
  }
  return rails;
}

Selection select_rails(const Options& o) {
  Selection sel;
  fi_info* hints = make_hints(o, "");
  fi_info* list = nullptr;
  int rc = fi_getinfo(api_version(), nullptr, nullptr, 0, hints, &list);
  fi_freeinfo(hints);
  if (rc != 0 && rc != -FI_ENODATA) {
    sel.status = TE_PROVIDER_UNAVAILABLE;
    sel.message = "fi_getinfo failed: " + fi_error(rc);
    return sel;
  }
  const std::string chosen = choose_provider(o, rma_providers(list), &sel);
  if (list) fi_freeinfo(list);
  list = nullptr;
  if (chosen.empty()) return sel;
  sel.provider = chosen;

  // Query the chosen provider again, with the source node for socket providers.
  hints = make_hints(o, chosen);
  bool node = is_socket_based(chosen) && !o.source_address.empty();
  rc =
      fi_getinfo(api_version(), node ? o.source_address.c_str() : nullptr, nullptr, node ? FI_SOURCE : 0, hints, &list);
  fi_freeinfo(hints);
  if (rc != 0) {
    sel.status = TE_PROVIDER_UNAVAILABLE;
    sel.message = "provider " + chosen + (node ? " with source address " + o.source_address : "") +
                  ": fi_getinfo failed: " + fi_error(rc);
    return sel;
  }
  std::vector<std::string> domains;
  sel.rails = rails_on(o, chosen, node, one_per_domain(list, chosen, &domains), domains);
  if (sel.rails.empty()) {
    sel.status = TE_PROVIDER_UNAVAILABLE;
    sel.message = "provider " + chosen + " found no usable NIC: its domains are [" + join(domains) + "]" +
                  (o.nics.empty() ? "" : ", none of them in the NIC filter [" + join(o.nics) + "]");
  }
  fi_freeinfo(list);
  return sel;
}

Discovery discover(const Options& o) {
  Discovery d;
  d.built_with_libfabric = true;
  uint32_t v = fi_version();
  d.version = std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v));
  d.providers = all_providers();
  fi_info* hints = make_hints(o, "");
  fi_info* list = nullptr;
  if (fi_getinfo(api_version(), nullptr, nullptr, 0, hints, &list) == 0) {
    std::set<std::string> seen;
    for (fi_info* i = list; i; i = i->next) {
      std::string key =
          std::string(i->fabric_attr->prov_name) + "/" + (i->domain_attr->name ? i->domain_attr->name : "");
      if (!seen.insert(key).second) continue;
      d.rma.push_back({i->fabric_attr->prov_name, i->fabric_attr->name ? i->fabric_attr->name : "",
                       i->domain_attr->name ? i->domain_attr->name : "", static_cast<uint64_t>(i->domain_attr->mr_mode),
                       is_hardware(i->fabric_attr->prov_name)});
    }
    fi_freeinfo(list);
  }
  fi_freeinfo(hints);
  Selection s = select_rails(o);
  for (fi_info* i : s.rails) fi_freeinfo(i);
  if (s.status == TE_OK)
    d.chosen = s.provider;
  else
    d.message = s.message;
  return d;
}

}  // namespace te::fabric
