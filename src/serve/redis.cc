#include "serve/redis.h"

#include <hiredis/hiredis.h>

#include <chrono>
#include <regex>
#include <thread>

namespace mc::serve {
namespace {

using Clock = std::chrono::steady_clock;

timeval to_timeval(double s) {
  timeval tv;
  tv.tv_sec = static_cast<long>(s);
  tv.tv_usec = static_cast<long>((s - static_cast<double>(tv.tv_sec)) * 1e6);
  return tv;
}

RedisReply convert(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::kString;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::kStatus;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = RedisReply::Type::kError;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::kInteger;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::kArray;
      out.elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
      break;
    default:
      out.type = RedisReply::Type::kNil;
  }
  return out;
}

// Errors the server gives while it is (re)starting: worth waiting out, like a lost connection.
bool transient_server_error(const std::string& msg) {
  std::string code = msg.substr(0, msg.find(' '));  // "BUSYGROUP" is not "BUSY"
  return code == "LOADING" || code == "BUSY" || code == "TRYAGAIN" || code == "MASTERDOWN";
}

}  // namespace

RedisUrl parse_redis_url(const std::string& url) {
  static const std::regex re(R"(^redis://(?::([^@]*)@)?([^:/@]+)(?::(\d+))?(?:/(\d+))?/?$)");
  std::smatch m;
  MC_CHECK(std::regex_match(url, m, re), "bad Redis URL '", url,
           "': expected redis://[:password@]host[:port][/db]");
  RedisUrl u;
  u.password = m[1];
  u.host = m[2];
  if (m[3].matched) u.port = std::stoi(m[3]);
  if (m[4].matched) u.db = std::stoi(m[4]);
  MC_CHECK(u.port > 0 && u.port < 65536, "bad port in Redis URL '", url, "'");
  return u;
}

const std::string& RedisReply::as_string() const {
  if (type == Type::kString || type == Type::kStatus) return str;
  throw RedisError(type == Type::kError ? "Redis error: " + str
                                        : "Redis reply is not a string");
}

long long RedisReply::as_integer() const {
  if (type == Type::kInteger) return integer;
  throw RedisError(type == Type::kError ? "Redis error: " + str
                                        : "Redis reply is not an integer");
}

Redis::Redis(RedisUrl url, double io_timeout_s, double reconnect_s)
    : url_(std::move(url)), io_timeout_s_(io_timeout_s), reconnect_s_(reconnect_s) {
  ensure_connected();
}

Redis::~Redis() {
  if (ctx_) redisFree(ctx_);
}

void Redis::connect_once() {
  if (ctx_) {
    redisFree(ctx_);
    ctx_ = nullptr;
  }
  redisContext* c = redisConnectWithTimeout(url_.host.c_str(), url_.port, to_timeval(io_timeout_s_));
  if (!c || c->err) {
    std::string why = c ? c->errstr : "out of memory";
    if (c) redisFree(c);
    throw Error("cannot reach Redis at " + url_.host + ":" + std::to_string(url_.port) + ": " +
                why);
  }
  ctx_ = c;
  redisSetTimeout(ctx_, to_timeval(io_timeout_s_));
  auto check = [&](std::vector<std::string> argv) {
    RedisReply r = send(argv, io_timeout_s_);
    if (r.type == RedisReply::Type::kError) {
      redisFree(ctx_);
      ctx_ = nullptr;
      if (transient_server_error(r.str)) throw Error("Redis is starting: " + r.str);
      throw RedisError("Redis " + argv[0] + " failed: " + r.str);
    }
  };
  if (!url_.password.empty()) check({"AUTH", url_.password});
  if (url_.db != 0) check({"SELECT", std::to_string(url_.db)});
  check({"PING"});
}

void Redis::ensure_connected() {
  if (ctx_) return;
  auto deadline = Clock::now() + std::chrono::duration<double>(reconnect_s_);
  int delay_ms = 50;
  while (true) {
    try {
      connect_once();
      return;
    } catch (const RedisError&) {
      throw;  // wrong password or db: waiting does not help
    } catch (const Error& e) {
      if (Clock::now() >= deadline) throw;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    delay_ms = std::min(delay_ms * 2, 1000);
  }
}

// One attempt on the current connection; a broken connection is closed and reported as Error.
RedisReply Redis::send(const std::vector<std::string>& argv, double timeout_s) {
  std::vector<const char*> ptrs;
  std::vector<size_t> lens;
  for (const auto& a : argv) {
    ptrs.push_back(a.data());
    lens.push_back(a.size());
  }
  if (timeout_s != io_timeout_s_) redisSetTimeout(ctx_, to_timeval(timeout_s));
  auto* r = static_cast<redisReply*>(
      redisCommandArgv(ctx_, static_cast<int>(argv.size()), ptrs.data(), lens.data()));
  if (timeout_s != io_timeout_s_ && ctx_ && !ctx_->err) redisSetTimeout(ctx_, to_timeval(io_timeout_s_));
  if (!r) {
    std::string why = ctx_->errstr;
    redisFree(ctx_);
    ctx_ = nullptr;
    throw Error("Redis connection lost during " + argv.at(0) + ": " + why);
  }
  RedisReply out = convert(r);
  freeReplyObject(r);
  return out;
}

RedisReply Redis::blocking(const std::vector<std::string>& argv, int block_ms) {
  MC_CHECK(!argv.empty(), "empty Redis command");
  auto deadline = Clock::now() + std::chrono::duration<double>(reconnect_s_);
  while (true) {
    ensure_connected();
    try {
      RedisReply r = send(argv, io_timeout_s_ + block_ms / 1000.0);
      if (r.type == RedisReply::Type::kError && transient_server_error(r.str) &&
          Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        continue;
      }
      if (r.type == RedisReply::Type::kError)
        throw RedisError("Redis " + argv[0] + " failed: " + r.str);
      return r;
    } catch (const RedisError&) {
      throw;
    } catch (const Error&) {
      if (Clock::now() >= deadline) throw;
      // reconnect (ensure_connected waits up to reconnect_s) and send once more
    }
  }
}

RedisReply Redis::command(const std::vector<std::string>& argv) { return blocking(argv, 0); }

RedisReply Redis::operator()(std::initializer_list<std::string_view> argv) {
  std::vector<std::string> v;
  for (auto a : argv) v.emplace_back(a);
  return command(v);
}

RedisReply Redis::transaction(const std::vector<std::vector<std::string>>& cmds) {
  auto deadline = Clock::now() + std::chrono::duration<double>(reconnect_s_);
  while (true) {
    ensure_connected();
    try {
      RedisReply r = send({"MULTI"}, io_timeout_s_);
      if (r.type == RedisReply::Type::kError) throw RedisError("Redis MULTI failed: " + r.str);
      for (const auto& c : cmds) {
        r = send(c, io_timeout_s_);
        if (r.type == RedisReply::Type::kError) {
          send({"DISCARD"}, io_timeout_s_);
          throw RedisError("Redis " + c.at(0) + " in a transaction failed: " + r.str);
        }
      }
      r = send({"EXEC"}, io_timeout_s_);
      if (r.type == RedisReply::Type::kError) throw RedisError("Redis EXEC failed: " + r.str);
      return r;
    } catch (const RedisError&) {
      throw;
    } catch (const Error&) {
      // A transaction cut off before EXEC did nothing; after EXEC it may have run: callers'
      // operations are idempotent.
      if (Clock::now() >= deadline) throw;
    }
  }
}

bool Redis::ping() {
  try {
    if (!ctx_) connect_once();
    RedisReply r = send({"PING"}, io_timeout_s_);
    return r.type == RedisReply::Type::kStatus;
  } catch (const std::exception&) {
    return false;
  }
}

RedisPool::Lease::~Lease() {
  if (!r_ || !pool_) return;
  std::lock_guard lk(pool_->mu_);
  pool_->idle_.push_back(std::move(r_));
}

RedisPool::Lease RedisPool::acquire() {
  {
    std::lock_guard lk(mu_);
    if (!idle_.empty()) {
      auto r = std::move(idle_.back());
      idle_.pop_back();
      return Lease(this, std::move(r));
    }
  }
  return Lease(this, std::make_unique<Redis>(url_));
}

}  // namespace mc::serve
