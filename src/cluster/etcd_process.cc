#include "src/cluster/etcd_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "src/base/env.h"
#include "src/cluster/http_client.h"

namespace shoal::cluster {
namespace {

// Binds 127.0.0.1:port (0: any); returns the port bound, or errno.
Result<uint16_t> bind_loopback(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::IOError(std::string("socket: ") + strerror(errno));
  // etcd (Go) sets SO_REUSEADDR too: a port in TIME_WAIT after a restart counts as free.
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  socklen_t len = sizeof addr;
  Status st;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    st = errno == EADDRINUSE
             ? Status::AlreadyExists("port 127.0.0.1:" + std::to_string(port) + " is taken")
             : Status::IOError("bind 127.0.0.1:" + std::to_string(port) + ": " + strerror(errno));
  } else if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    st = Status::IOError(std::string("getsockname: ") + strerror(errno));
  }
  close(fd);
  if (!st.ok()) return st;
  return ntohs(addr.sin_port);
}

Result<std::string> find_binary(const std::string& binary) {
  auto executable = [](const std::string& path) {
    struct stat sb;
    return stat(path.c_str(), &sb) == 0 && S_ISREG(sb.st_mode) && access(path.c_str(), X_OK) == 0;
  };
  const std::string advice = " (Debian: apt-get install etcd-server; scripts/install-deps.sh)";
  if (binary.find('/') != std::string::npos) {
    if (executable(binary)) return binary;
    return Status::NotFound("etcd binary '" + binary + "' not found or not executable" + advice);
  }
  const char* path_env = getenv("PATH");
  std::stringstream dirs(path_env != nullptr ? path_env : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + binary;
    if (executable(candidate)) return candidate;
  }
  return Status::NotFound("etcd binary '" + binary + "' not found in PATH" + advice);
}

// The last lines of a log file, for error messages.
std::string log_tail(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "(no log at " + path + ")";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff from = size > 1500 ? size - 1500 : 0;
  in.seekg(from);
  std::string tail((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return "log " + path + " ends: " + tail;
}

}  // namespace

Result<uint16_t> free_loopback_port() {
  return bind_loopback(0);
}

Result<std::unique_ptr<EtcdProcess>> EtcdProcess::start(EtcdProcessOptions options) {
  if (options.data_dir.empty()) return Status::InvalidArgument("etcd: data_dir is required");
  auto binary = find_binary(options.binary);
  if (!binary.ok()) return binary.status();
  // Pick free ports (distinct), check given ones.
  for (uint16_t* port : {&options.client_port, &options.peer_port}) {
    for (int attempt = 0; attempt < 16 && *port == 0; ++attempt) {
      auto p = free_loopback_port();
      if (!p.ok()) return p.status();
      if (*p != options.client_port && *p != options.peer_port) *port = *p;
    }
    if (*port == 0) return Status::Unavailable("etcd: found no free loopback port");
  }
  if (options.client_port == options.peer_port) {
    return Status::InvalidArgument("etcd: client and peer port are both " +
                                   std::to_string(options.client_port));
  }
  if (options.log_path.empty()) options.log_path = options.data_dir + ".log";
  std::error_code ec;
  std::filesystem::create_directories(options.data_dir, ec);
  if (ec) {
    return Status::IOError("etcd: cannot create data dir '" + options.data_dir +
                           "': " + ec.message());
  }
  std::unique_ptr<EtcdProcess> p(new EtcdProcess(std::move(options)));
  p->binary_path_ = std::move(*binary);
  SHOAL_TRY(p->launch());
  return p;
}

std::string EtcdProcess::endpoint() const {
  return "127.0.0.1:" + std::to_string(options_.client_port);
}

Status EtcdProcess::launch() {
  SHOAL_ASSERT(pid_ < 0, "EtcdProcess::launch while running");
  for (const auto& [port, what] :
       {std::pair{options_.client_port, "client"}, std::pair{options_.peer_port, "peer"}}) {
    auto bound = bind_loopback(port);
    if (bound.ok()) continue;
    if (bound.status().code() != Code::kAlreadyExists) return bound.status();
    return Status::AlreadyExists(std::string("etcd ") + what + " " + bound.status().message());
  }
  const std::string client_url = "http://" + endpoint();
  const std::string peer_url = "http://127.0.0.1:" + std::to_string(options_.peer_port);
  std::vector<std::string> args = {
      binary_path_,
      "--name=" + options_.name,
      "--data-dir=" + options_.data_dir,
      "--listen-client-urls=" + client_url,
      "--advertise-client-urls=" + client_url,
      "--listen-peer-urls=" + peer_url,
      "--initial-advertise-peer-urls=" + peer_url,
      "--initial-cluster=" + options_.name + "=" + peer_url,
      "--initial-cluster-state=new",
      "--heartbeat-interval=" + std::to_string(options_.heartbeat_ms),
      "--election-timeout=" + std::to_string(options_.election_ms),
  };
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int log_fd =
      open(options_.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return Status::IOError("etcd: cannot open log '" + options_.log_path + "': " + strerror(errno));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(log_fd);
    return Status::IOError(std::string("etcd: fork: ") + strerror(err));
  }
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    if (options_.detach) {
      setsid();  // its own session: a Ctrl-C at the starting terminal does not reach it
    } else {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
    }
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(log_fd);
  pid_ = pid;

  // Wait (bounded) until /health says true, or the child exits.
  Env& clock = RealEnv::instance();
  const uint64_t deadline_ns = clock.now_ns() + options_.start_timeout_ms * 1'000'000ULL;
  HttpClient http;
  const std::string health_url = client_url + "/health";
  for (;;) {
    int wstatus = 0;
    if (waitpid(pid_, &wstatus, WNOHANG) == pid_) {
      pid_ = -1;
      return Status::Unavailable("etcd exited at start (status " + std::to_string(wstatus) + "); " +
                                 log_tail(options_.log_path));
    }
    HttpResponse response;
    HttpFailure failure;
    if (http.request(health_url, "", /*get=*/true, 200, &response, &failure) &&
        response.status == 200 && response.body.find("\"true\"") != std::string::npos) {
      return Status::Ok();
    }
    if (clock.now_ns() >= deadline_ns) break;
    clock.sleep_ns(20'000'000);
  }
  kill();
  return Status::Unavailable("etcd did not answer " + health_url + " within " +
                             std::to_string(options_.start_timeout_ms) + " ms; " +
                             log_tail(options_.log_path));
}

Status EtcdProcess::restart() {
  SHOAL_ASSERT(pid_ < 0, "EtcdProcess::restart while running");
  return launch();
}

void EtcdProcess::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int wstatus = 0;
  while (waitpid(pid_, &wstatus, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

Status EtcdProcess::stop(uint64_t grace_ms) {
  if (pid_ <= 0) return Status::Ok();
  if (::kill(pid_, SIGTERM) != 0 && errno != ESRCH) {
    return Status::IOError(std::string("etcd: kill: ") + strerror(errno));
  }
  Env& clock = RealEnv::instance();
  const uint64_t deadline_ns = clock.now_ns() + grace_ms * 1'000'000ULL;
  while (clock.now_ns() < deadline_ns) {
    int wstatus = 0;
    const pid_t r = waitpid(pid_, &wstatus, WNOHANG);
    if (r == pid_ || (r < 0 && errno == ECHILD)) {
      pid_ = -1;
      return Status::Ok();
    }
    clock.sleep_ns(10'000'000);
  }
  kill();
  return Status::Ok();
}

EtcdProcess::~EtcdProcess() {
  stop().ignore();
}

}  // namespace shoal::cluster
