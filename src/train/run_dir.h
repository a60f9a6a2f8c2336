// What a training run may touch in its --out folder. It writes metrics.jsonl, one ckpt-step<N> folder per
// checkpoint and the link `ckpt` to the newest; it deletes only what it can prove it wrote: a ckpt-step<N> folder
// directly inside --out (never one reached through a link) whose commit marker names this run, the checkpoint it
// resumed from, or (with --overwrite) an earlier agoq run; and in it only the checkpoint's own files. A `ckpt`,
// ckpt-step* or metrics.jsonl that is not what agoq makes there is refused before training.
#pragma once
#include <string>

namespace agoq {

// Who a run is: the id its checkpoints record (trainer.json "run"), and what it may replace.
struct RunIdentity {
  std::string run;            // this run's id (a resumed run keeps its checkpoint's when it continues in --out)
  std::string resume_commit;  // the commit of the checkpoint it resumed from ("" for a fresh run)
  bool overwrite = false;     // --overwrite: earlier agoq runs in --out may be replaced
};

// Whether `name` is one agoq gives a checkpoint folder: ckpt-step<digits>.
bool ckpt_folder_name_ours(const std::string& name);

// A run never writes into what it reads from: refuses --out inside `resume` or `init_from` (the checkpoints given
// to --resume and --init-from, "" when not given), and an `init_from` that is a checkpoint of --out, which the
// run's saves replace (by its own name, or after --overwrite). Called before --out is touched.
void run_dir_check_sources(const std::string& out, const std::string& resume, const std::string& init_from);

// Refuses, in one line naming the path, an --out whose `ckpt`, ckpt-step* or metrics.jsonl is not what agoq keeps
// there, and (without --overwrite) one that holds an earlier run this run does not continue. `resume`: the
// checkpoint given to --resume, or "".
void run_dir_check(const std::string& out, bool overwrite, const std::string& resume);

// A fresh id for a run.
std::string run_id_new();

// Points `ckpt` at the folder `name` (one atomic rename), then deletes the checkpoint the link named before when
// `who` may (see above). Returns a note for the log when it kept one that it could not prove its own, else "".
std::string ckpt_link_switch(const std::string& out, const std::string& name, const RunIdentity& who);

}  // namespace agoq
