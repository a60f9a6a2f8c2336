// A prepared data folder (`agoq prepare --out D`, docs/data-format.md): the tokenizer's files (tokenizer.model, or
// tokenizer.json and tokenizer_config.json), train.bin, val.bin and meta.json, written as one set. The set is made in
// D/.prepare.tmp and then moved into D file by file, meta.json last and after the old meta.json is gone, so meta.json
// is the set's commit marker: a folder with .prepare.tmp and no meta.json is a replacement that was interrupted, and a
// training refuses it rather than mix two sets.
#pragma once
#include <filesystem>
#include <string>

namespace agoq {

// Every file a set may hold, meta.json last; a set holds the tokenizer files of its tokenizer's kind.
inline constexpr const char* kPreparedFiles[] = {"tokenizer.model", "tokenizer.json", "tokenizer_config.json",
                                                 "train.bin",       "val.bin",        "meta.json"};

// Throws, naming the folder, when `dir` holds a prepared set and `overwrite` is false, or when it holds a set's file
// but no corpus agoq prepared (a model's folder with its tokenizer.model, a checkpoint): --overwrite replaces only a
// prepared corpus.
void prepared_dir_check_replaceable(const std::filesystem::path& dir, bool overwrite);

// Throws, naming the folder, when a replacement of its set was interrupted (see above).
void prepared_dir_check_complete(const std::filesystem::path& dir);

// Where the new set is written (`dir`/.prepare.tmp, made empty), then prepared_dir_commit moves it into place (and
// removes the old set's files the new one lacks: a tokenizer.model beside a new tokenizer.json).
std::filesystem::path prepared_dir_staging(const std::filesystem::path& dir);
void prepared_dir_commit(const std::filesystem::path& dir);

}  // namespace agoq
