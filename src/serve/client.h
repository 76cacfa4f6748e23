// C++ client of MooreEval's HTTP API: submits candidates in batches with bounded concurrency,
// waits for every result, retries only what is transient (connection errors, 429 with its
// Retry-After, 502/503/504), and surfaces infrastructure errors as such (the row's verdict is
// infra_error; it carries no reward) instead of scoring them.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/check.h"
#include "eval/candidates.h"

namespace mc::serve {

struct ClientOptions {
  std::string url = "http://127.0.0.1:8080";
  std::string token;           // bearer token ("" : none)
  int concurrency = 8;         // requests in flight at once
  size_t batch = 32;           // candidates per request
  double timeout_s = 3600;     // for the whole verify() call
  double poll_wait_s = 20;     // server-side wait per results request
  int max_transient_retries = 8;
};

struct VerifyItem {
  std::string problem;         // a key the server knows ("L1/19_ReLU"), or
  std::string problem_source;  // the problem's source (then problem_name and level name it)
  std::string problem_name;
  int level = 0;
  std::string answer;
  std::string sample_id = "0";
};

// A candidate with a resolved problem, as the service is asked about it (the problem's source,
// so the server need not know the problem set).
VerifyItem verify_item(const eval::Candidate& c);

// A 4xx answer other than 429: the request itself is wrong; retrying will not help.
class ClientError : public Error {
 public:
  ClientError(int status, const std::string& msg) : Error(msg), status(status) {}
  int status;
};

class VerifyClient {
 public:
  explicit VerifyClient(ClientOptions opts);
  // One result row per item, in order. Throws ClientError for a rejected request and
  // mc::Error when the server stays unreachable or the deadline passes.
  std::vector<nlohmann::json> verify(const std::vector<VerifyItem>& items,
                                     const std::function<void(size_t)>& on_done = {});
  nlohmann::json health();

 private:
  nlohmann::json post(const std::string& path, const nlohmann::json& body);
  ClientOptions opts_;
};

}  // namespace mc::serve
