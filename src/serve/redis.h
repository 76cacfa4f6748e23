// A blocking Redis connection over hiredis, with the reply tree copied into plain values (so no
// hiredis object outlives a call) and reconnection: a command that meets a broken connection
// reconnects (retrying for `reconnect_s`) and is sent once more. Commands are therefore
// at-least-once; the queue built on top (redis_queue.h) is designed for that.
// Not thread-safe: one thread per connection (see RedisPool).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/check.h"

struct redisContext;

namespace mc::serve {

struct RedisUrl {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
  std::string password;
};
// redis://[:password@]host[:port][/db]; throws mc::Error naming what is wrong.
RedisUrl parse_redis_url(const std::string& url);

struct RedisReply {
  enum class Type { kNil, kString, kStatus, kInteger, kArray, kError };
  Type type = Type::kNil;
  std::string str;  // kString, kStatus, kError
  long long integer = 0;
  std::vector<RedisReply> elements;

  bool is_nil() const { return type == Type::kNil; }
  bool is_array() const { return type == Type::kArray; }
  const std::string& as_string() const;  // throws unless kString or kStatus
  long long as_integer() const;          // throws unless kInteger
};

// The server answered with an error (wrong type, script error...): not a connection problem.
class RedisError : public Error {
 public:
  using Error::Error;
};

class Redis {
 public:
  // io_timeout_s bounds every call except blocking ones, which get their BLOCK time on top.
  explicit Redis(RedisUrl url, double io_timeout_s = 10, double reconnect_s = 30);
  ~Redis();
  Redis(const Redis&) = delete;
  Redis& operator=(const Redis&) = delete;

  RedisReply command(const std::vector<std::string>& argv);
  RedisReply operator()(std::initializer_list<std::string_view> argv);
  // A command that may block server-side for up to block_ms (XREADGROUP ... BLOCK).
  RedisReply blocking(const std::vector<std::string>& argv, int block_ms);
  // Commands sent as one MULTI/EXEC transaction; returns EXEC's array.
  RedisReply transaction(const std::vector<std::vector<std::string>>& cmds);

  bool ping();  // false when the server cannot be reached (no retry loop)
  const RedisUrl& url() const { return url_; }

 private:
  void connect_once();
  void ensure_connected();
  RedisReply send(const std::vector<std::string>& argv, double timeout_s);
  RedisUrl url_;
  double io_timeout_s_, reconnect_s_;
  redisContext* ctx_ = nullptr;
};

// Connections for handler threads: acquire() hands out an idle one or opens a new one.
class RedisPool {
 public:
  explicit RedisPool(RedisUrl url) : url_(std::move(url)) {}
  class Lease {
   public:
    Lease(RedisPool* pool, std::unique_ptr<Redis> r) : pool_(pool), r_(std::move(r)) {}
    ~Lease();
    Lease(Lease&&) = default;
    Redis& operator*() { return *r_; }
    Redis* operator->() { return r_.get(); }

   private:
    RedisPool* pool_;
    std::unique_ptr<Redis> r_;
  };
  Lease acquire();
  const RedisUrl& url() const { return url_; }

 private:
  RedisUrl url_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Redis>> idle_;
};

}  // namespace mc::serve
