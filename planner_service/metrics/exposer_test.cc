#include "planner_service/metrics/exposer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/gauge.h"

namespace octopipe::metrics {
namespace {

using ::testing::HasSubstr;

// A TCP connection to 127.0.0.1:port; -1 on failure.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// GET /metrics over a fresh connection; returns the whole response, or "" when nothing came
// back within `timeout_ms`.
std::string Scrape(int port, int timeout_ms) {
  const int fd = Connect(port);
  if (fd < 0) return "";
  const std::string request =
      "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return "";
  }
  std::string response;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) break;
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;  // the server closed: the response is complete
    response.append(buf, n);
  }
  close(fd);
  return response;
}

std::shared_ptr<prometheus::Registry> RegistryWithAGauge() {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildGauge()
      .Name("octopipe_test_value")
      .Help("A value for the test.")
      .Register(*registry)
      .Add({})
      .Set(7);
  return registry;
}

TEST(MetricsEndpointTest, ServesTheRegistryOnAnEphemeralPort) {
  auto endpoint = MetricsEndpoint::Start(RegistryWithAGauge(), MetricsEndpointOptions{});
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  ASSERT_GT((*endpoint)->port(), 0);
  const std::string response = Scrape((*endpoint)->port(), 30000);
  EXPECT_THAT(response, HasSubstr("200 OK"));
  EXPECT_THAT(response, HasSubstr("\noctopipe_test_value 7\n"));
}

// Clients that connect and never send a request each hold a civetweb worker until the request
// timeout; with several workers a scrape is still answered at once. The timeout is set far
// above the scrape's budget, so a scrape queued behind them would fail.
TEST(MetricsEndpointTest, HalfOpenConnectionsDoNotBlockAScrape) {
  MetricsEndpointOptions options;
  options.num_threads = 8;
  options.request_timeout_ms = 120000;
  auto endpoint = MetricsEndpoint::Start(RegistryWithAGauge(), options);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) {
    const int fd = Connect((*endpoint)->port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  const std::string response = Scrape((*endpoint)->port(), 30000);
  EXPECT_THAT(response, HasSubstr("\noctopipe_test_value 7\n"));
  for (int fd : idle) close(fd);
}

// The check above can fail: with one worker, one half-open connection does block the scrape.
TEST(MetricsEndpointTest, OneWorkerIsBlockedByAHalfOpenConnection) {
  MetricsEndpointOptions options;
  options.num_threads = 1;
  options.request_timeout_ms = 120000;
  auto endpoint = MetricsEndpoint::Start(RegistryWithAGauge(), options);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int idle = Connect((*endpoint)->port());
  ASSERT_GE(idle, 0);
  EXPECT_EQ(Scrape((*endpoint)->port(), 1500), "");
  close(idle);
}

TEST(MetricsEndpointTest, APortInUseIsUnavailableNamingTheAddress) {
  auto first = MetricsEndpoint::Start(RegistryWithAGauge(), MetricsEndpointOptions{});
  ASSERT_TRUE(first.ok()) << first.status();
  MetricsEndpointOptions options;
  options.port = (*first)->port();
  auto second = MetricsEndpoint::Start(RegistryWithAGauge(), options);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("127.0.0.1:", (*first)->port())));
}

TEST(MetricsEndpointTest, BadOptionsAreInvalidArgument) {
  MetricsEndpointOptions options;
  options.port = 70000;
  EXPECT_EQ(MetricsEndpoint::Start(RegistryWithAGauge(), options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.port = 0;
  options.num_threads = 0;
  EXPECT_EQ(MetricsEndpoint::Start(RegistryWithAGauge(), options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace octopipe::metrics
