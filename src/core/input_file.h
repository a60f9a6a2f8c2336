// Files and folders agoq reads from users, opened so that a wrong path is one line naming it and the reason: never a
// hang (open() of a FIFO waits for a writer), a library's text (a folder read through a stream gives libstdc++'s
// "basic_filebuf::underflow ... Is a directory") or the wrong reason (a symlink loop read as "no such file").
#pragma once
#include <string>

namespace agoq {

// Why `path` cannot be read as a file: the system's reason ("No such file or directory", "Too many levels of
// symbolic links", "Permission denied"), or what it is instead ("it is a folder, not a file", "it is a FIFO, not a
// file"); "" when it is a regular file that opens for reading.
std::string input_file_problem(const std::string& path);

// A descriptor of the regular file `path` (the caller closes it), or one agoq::Error
// "cannot open <what> <path>: <reason>". A FIFO is refused without blocking.
int input_file_open(const std::string& path, const std::string& what);

// The whole of the regular file `path`, or one agoq::Error as input_file_open's (or naming a failed read).
std::string input_file_read(const std::string& path, const std::string& what);

// Why the folder `path` cannot be listed and searched (the system's reason, or "it is a file, not a folder"); ""
// when it can.
std::string input_dir_problem(const std::string& path);

}  // namespace agoq
