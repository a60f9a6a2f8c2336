// TensorBoard event files (`agoq train --tensorboard DIR`): every numeric field of a run's metrics record becomes a
// scalar of that step, written as TensorBoard's own Event protobuf (tboard/event.proto) in TFRecord framing
// (tboard/tfrecord.h), so `tensorboard --logdir DIR` shows the run while it trains.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace agoq {

// The scalars of a metrics record: each number (integers, floats; not booleans) under its key, nested objects'
// numbers under "outer/inner" (memory by category: "memory/peak/weights"), in the record's order. Strings, arrays,
// booleans and the key "step" (the event's own step) are left out.
std::vector<std::pair<std::string, double>> tensorboard_scalars(const nlohmann::json& record);

class TensorBoardWriter {
 public:
  // Creates `dir` (and its parents) if needed and a new events file there, events.out.tfevents.<seconds>.<host>
  // (with .<n> added if that name is taken: an existing file is never replaced), whose first record names the
  // format version. Errors are one agoq::Error naming `flag` and the folder.
  explicit TensorBoardWriter(const std::string& dir, const char* flag = "--tensorboard");
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One event of the record's scalars at `step` (tensorboard_scalars), in the file when this returns, so a
  // TensorBoard reading the folder sees it. A failed write throws.
  void step(long step, const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  void record_write(const std::string& event_bytes);

  int fd_ = -1;
  std::string path_;
};

}  // namespace agoq
