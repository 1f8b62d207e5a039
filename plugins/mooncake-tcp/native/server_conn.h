// The target side of one connection: handshake (epoch check, optional challenge/response),
// then WRITE/READ/NOTIFY requests validated against this process's registered
// remote-accessible memory before any byte is touched. A malformed frame closes this
// connection only.
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "transport.h"

namespace tetcp {

class ServerConn : public IoHandler {
 public:
  ServerConn(Transport* t, Loop* loop, int fd);
  ~ServerConn() override;
  void on_event(uint32_t events) override;
  void on_tick(int64_t now) override;
  void on_shutdown() override;

 private:
  enum State { HELLO, AUTH, READY };
  struct Out {
    uint8_t head[kHeaderSize + 48];
    uint32_t head_len = 0;
    uint64_t body = 0;  // registered memory (READ responses)
    uint64_t body_len = 0;
  };
  void read_input();
  bool parse();
  bool on_header(const Header& h);
  int32_t validate(const Header& h) const;
  void finish_body();
  void respond(const Header& req, int32_t status, uint64_t body = 0, uint64_t body_len = 0,
               const uint8_t* extra = nullptr, size_t extra_len = 0);
  void flush();
  void drop(const std::string& why);
  void set_interest();

  Transport* t_;
  Loop* loop_;
  int fd_;
  State state_ = HELLO;
  int64_t deadline_;
  bool close_after_flush_ = false;
  bool want_out_ = false;
  bool input_paused_ = false;
  uint32_t interest_ = 0;
  std::string peer_name_ = "?";
  std::vector<uint8_t> rbuf_;
  size_t rpos_ = 0, rend_ = 0;
  bool in_body_ = false;
  enum BodyMode { DIRECT, DRAIN, CTRL } mode_ = DRAIN;
  Header cur_;
  uint64_t body_left_ = 0;
  uint64_t body_dst_ = 0;
  int32_t body_status_ = 0;
  std::vector<uint8_t> ctrl_body_;
  std::deque<Out> out_;
  uint64_t out_off_ = 0;
  uint8_t client_nonce_[kNonceSize];
  uint8_t server_nonce_[kNonceSize];
};

}  // namespace tetcp
