// train_run and the session's stateless parts: the shape flags against a checkpoint, a file's digest.
#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <variant>
#include <vector>

#include "arch/config_fields.h"
#include "core/error.h"
#include "core/hash.h"
#include "train/session.h"

namespace agoq {

namespace fs = std::filesystem;

std::string model_flags_disagreeing(const TrainOptions& o, const LlamaConfig& ck, const char* source) {
  const LlamaConfig& m = o.model;
  std::ostringstream out;
  auto field = [&](const std::string& flag, const auto& given, const auto& saved) {
    if (std::find(o.model_flags.begin(), o.model_flags.end(), flag) == o.model_flags.end() || given == saved) return;
    out << (out.tellp() > 0 ? ", " : "") << flag << ' ' << given << " (" << source << ": " << saved << ')';
  };
  for (const ConfigField& f : kConfigFields)
    if (f.flag) std::visit([&](auto member) { field(f.flag, m.*member, ck.*member); }, f.member);
  if (std::find(o.model_flags.begin(), o.model_flags.end(), "--config") != o.model_flags.end()) {
    LlamaConfig file = m;  // the data and the sequence length decide these two, not the file
    file.vocab_size = ck.vocab_size, file.max_seq_len = ck.max_seq_len;
    const std::string diff = config_diff(file, ck);
    if (!diff.empty()) out << (out.tellp() > 0 ? ", " : "") << "--config (file vs " << source << ": " << diff << ')';
  }
  return out.str();
}

std::string file_digest(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  AGOQ_CHECK(f, "cannot open ", p.string());
  std::vector<char> buf(1 << 20);
  uint64_t h = kHashFnv1a64Basis, size = 0;
  while (f.read(buf.data(), std::streamsize(buf.size())) || f.gcount() > 0) {
    h = hash_fnv1a64(buf.data(), size_t(f.gcount()), h);
    size += uint64_t(f.gcount());
  }
  std::ostringstream os;
  os << p.filename().string() << ' ' << size << " bytes fnv " << std::hex << h;
  return os.str();
}

TrainResult train_run(const TrainOptions& opt) {
  TrainSession session(opt);
  return session.run();
}

}  // namespace agoq
