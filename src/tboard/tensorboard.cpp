#include "tboard/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "tboard/event.pb.h"
#include "tboard/tfrecord.h"

namespace agoq {

namespace fs = std::filesystem;

namespace {

void scalars_collect(const nlohmann::json& j, const std::string& prefix,
                     std::vector<std::pair<std::string, double>>& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string tag = prefix + it.key();
    if (it->is_object()) scalars_collect(*it, tag + "/", out);
    else if (it->is_number() && tag != "step") out.emplace_back(tag, it->get<double>());
  }
}

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// A new file in `dir`: TensorFlow's name for an events file, with a counter added if another writer took it.
int events_file_create(const std::string& dir, const char* flag, std::string& path) {
  const std::string base =
      (fs::path(dir) / "events.out.tfevents.").string() + std::to_string(long(wall_time_now())) + "." + host_name();
  for (int n = 0;; ++n) {
    path = n == 0 ? base : base + "." + std::to_string(n);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) return fd;
    AGOQ_CHECK(errno == EEXIST && n < 1000, flag, " ", dir,
               ": cannot create an events file there: ", std::strerror(errno));
  }
}

}  // namespace

std::vector<std::pair<std::string, double>> tensorboard_scalars(const nlohmann::json& record) {
  std::vector<std::pair<std::string, double>> out;
  if (record.is_object()) scalars_collect(record, "", out);
  return out;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, const char* flag) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  AGOQ_CHECK(fs::is_directory(dir), flag, " ", dir, ": ",
             fs::exists(dir) ? "not a folder" : "cannot create the folder" + (ec ? ": " + ec.message() : ""));
  fd_ = events_file_create(dir, flag, path_);
  tensorboard::Event e;
  e.set_wall_time(wall_time_now());
  e.set_file_version("brain.Event:2");  // the version every TensorBoard reads
  record_write(e.SerializeAsString());
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::step(long step, const nlohmann::json& record) {
  tensorboard::Event e;
  e.set_wall_time(wall_time_now());
  e.set_step(step);
  tensorboard::Summary* summary = e.mutable_summary();
  for (const auto& [tag, value] : tensorboard_scalars(record)) {
    tensorboard::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(float(value));
  }
  record_write(e.SerializeAsString());
}

// One write of the whole framed record (the kernel's page cache from then on), so a reader polling the file meets
// at most one record cut short at its end, which it waits on.
void TensorBoardWriter::record_write(const std::string& event_bytes) {
  const std::string rec = tfrecord_frame(event_bytes);
  size_t done = 0;
  while (done < rec.size()) {
    const ssize_t n = ::write(fd_, rec.data() + done, rec.size() - done);
    if (n < 0 && errno == EINTR) continue;
    AGOQ_CHECK(n > 0, "cannot write TensorBoard events file ", path_, ": ", n < 0 ? std::strerror(errno) : "no space");
    done += size_t(n);
  }
}

}  // namespace agoq
